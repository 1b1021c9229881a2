-- Usage records written by the reconcilers, and their bookkeeping.

-- One global sequence in commit order: a metering transaction takes the head
-- row as its last step and holds it until commit, so a reader paging by
-- sequence never sees record n+1 before record n is visible.
CREATE TABLE usage_head (
    id       smallint PRIMARY KEY CHECK (id = 1),
    last_seq bigint NOT NULL
);
INSERT INTO usage_head (id, last_seq) VALUES (1, 0);

CREATE TABLE usage_records (
    seq            bigint PRIMARY KEY,
    usage_id       text NOT NULL UNIQUE,
    tenant_id      text NOT NULL,
    project_id     text,
    meter          text NOT NULL,
    quantity_micro bigint NOT NULL CHECK (quantity_micro >= 0),
    unit           text NOT NULL CHECK (unit IN ('slot-hours', 'instance-hours')),
    period_start   bigint NOT NULL,
    period_end     bigint NOT NULL,
    grant_id       text,
    instance_id    text,
    -- What the record is about (a grant or an instance) and where it ran (a
    -- grant, a reservation, or on-demand): one record per meter, subject,
    -- target and hour, never two.
    subject        text NOT NULL,
    target         text NOT NULL,
    tags           jsonb NOT NULL,
    recorded_at    bigint NOT NULL,
    UNIQUE (meter, subject, target, period_start)
);
CREATE INDEX usage_records_tenant_idx ON usage_records (tenant_id, seq);

-- Instance meters are written up to here (a bucket boundary).
ALTER TABLE instances ADD COLUMN usage_metered_through bigint;
UPDATE instances SET usage_metered_through = created_at;
ALTER TABLE instances ALTER COLUMN usage_metered_through SET NOT NULL;

-- Scan retry with backoff after a provider failure.
ALTER TABLE provider_accounts ADD COLUMN scan_failures integer NOT NULL DEFAULT 0;
ALTER TABLE provider_accounts ADD COLUMN scan_retry_at bigint;
