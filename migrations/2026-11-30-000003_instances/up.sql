-- Instances and their placement history.

CREATE TABLE instances (
    instance_id    text PRIMARY KEY,
    tenant_id      text NOT NULL REFERENCES tenants (tenant_id),
    project_id     text REFERENCES projects (project_id),
    pool_id        text NOT NULL REFERENCES pools (pool_id),
    flavor         text NOT NULL,
    name           text NOT NULL,
    billing        text NOT NULL CHECK (billing IN ('standard', 'none')),
    state          text NOT NULL CHECK (state IN ('running', 'stopped', 'deleted')),
    -- Where it is now. A stopped instance keeps a grant slot (kind grant);
    -- stopped elsewhere it holds nothing (kind none).
    placement_kind text NOT NULL CHECK (placement_kind IN ('grant', 'reservation', 'ondemand', 'none')),
    grant_id       text,
    account_id     text,
    reservation_id text,
    created_at     bigint NOT NULL,
    deleted_at     bigint,
    CHECK ((placement_kind = 'grant') = (grant_id IS NOT NULL)),
    CHECK ((placement_kind IN ('grant', 'reservation')) = (reservation_id IS NOT NULL))
);
CREATE INDEX instances_reservation_idx ON instances (account_id, reservation_id)
    WHERE reservation_id IS NOT NULL AND state <> 'deleted';
CREATE INDEX instances_tenant_idx ON instances (tenant_id, created_at DESC, instance_id DESC);

-- Placement segments [from_ms, to_ms): what billing reads. A segment is
-- written at the exact instant of its transition (take-in at startsAt,
-- hand-over at endsAt, a stop at its request), whenever it is settled.
-- `running` is false while stopped; kind `none` bills nothing.
CREATE TABLE placement_segments (
    segment_id     bigserial PRIMARY KEY,
    instance_id    text NOT NULL REFERENCES instances (instance_id),
    from_ms        bigint NOT NULL,
    to_ms          bigint,
    kind           text NOT NULL CHECK (kind IN ('grant', 'reservation', 'ondemand', 'none')),
    running        boolean NOT NULL,
    grant_id       text,
    account_id     text,
    reservation_id text,
    CHECK (to_ms IS NULL OR to_ms > from_ms)
);
CREATE INDEX placement_segments_instance_idx ON placement_segments (instance_id, from_ms);
CREATE UNIQUE INDEX placement_segments_open_idx ON placement_segments (instance_id) WHERE to_ms IS NULL;
