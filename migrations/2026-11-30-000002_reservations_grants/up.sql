-- Provider capacity reservations seen by scans, and the grants of their slots.

CREATE TABLE reservations (
    account_id      text NOT NULL REFERENCES provider_accounts (account_id),
    reservation_id  text NOT NULL,
    region          text NOT NULL,
    zone            text NOT NULL,
    flavor          text NOT NULL,
    total           bigint NOT NULL CHECK (total >= 0),
    provider_in_use bigint NOT NULL CHECK (provider_in_use >= 0),
    status          text NOT NULL CHECK (status IN ('ready', 'not-ready', 'gone')),
    pool_id         text REFERENCES pools (pool_id),
    last_scanned_at bigint NOT NULL,
    gone_at         bigint,
    PRIMARY KEY (account_id, reservation_id)
);
CREATE INDEX reservations_pool_idx ON reservations (pool_id, flavor) WHERE pool_id IS NOT NULL;

-- `settled_state` is what settlement has recorded (transitions applied and
-- their events published); the API reports the truth at its now, derived from
-- the term, whether or not settlement has run.
CREATE TABLE grants (
    grant_id        text PRIMARY KEY,
    account_id      text NOT NULL,
    reservation_id  text NOT NULL,
    pool_id         text NOT NULL REFERENCES pools (pool_id),
    tenant_id       text NOT NULL REFERENCES tenants (tenant_id),
    project_id      text REFERENCES projects (project_id),
    slots           integer NOT NULL CHECK (slots > 0),
    starts_at       bigint NOT NULL,
    ends_at         bigint NOT NULL,
    settled_state   text NOT NULL CHECK (settled_state IN ('scheduled', 'active', 'ended', 'cancelled')),
    reason          text CHECK (reason IN ('term-over', 'ended', 'reservation-gone', 'tenant-deleted')),
    created_at      bigint NOT NULL,
    ended_at        bigint,
    metered_through bigint NOT NULL,
    CHECK (ends_at >= starts_at),
    CHECK (metered_through >= starts_at AND metered_through <= ends_at),
    FOREIGN KEY (account_id, reservation_id) REFERENCES reservations (account_id, reservation_id)
);
CREATE INDEX grants_reservation_idx ON grants (account_id, reservation_id);
CREATE INDEX grants_tenant_idx ON grants (tenant_id, created_at DESC, grant_id DESC);
CREATE INDEX grants_all_idx ON grants (created_at DESC, grant_id DESC);
CREATE INDEX grants_unmetered_idx ON grants (ends_at) WHERE settled_state <> 'cancelled' AND metered_through < ends_at;

-- Keys limited to a provider account outlive the account (revoked with it).
ALTER TABLE api_keys DROP CONSTRAINT api_keys_account_id_fkey;
