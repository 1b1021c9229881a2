-- Foundation: tenants, projects, API keys, provider accounts, pools and quotas,
-- idempotency keys, the event log and the manual clock.
-- All instants are epoch milliseconds (UTC) in bigint columns.

CREATE TABLE tenants (
    tenant_id    text PRIMARY KEY,
    display_name text NOT NULL,
    state        text NOT NULL CHECK (state IN ('active', 'deleted')),
    created_at   bigint NOT NULL,
    deleted_at   bigint
);

-- The root tenant exists from the first migration. A deployment that configures
-- another BC_ROOT_TENANT gets that tenant created by api-server at start.
INSERT INTO tenants (tenant_id, display_name, state, created_at)
VALUES ('root', 'root', 'active', (extract(epoch FROM now()) * 1000)::bigint);

CREATE TABLE projects (
    project_id text PRIMARY KEY,
    tenant_id  text NOT NULL REFERENCES tenants (tenant_id),
    name       text NOT NULL,
    created_at bigint NOT NULL
);
CREATE INDEX projects_tenant_idx ON projects (tenant_id, created_at DESC, project_id DESC);

CREATE TABLE provider_accounts (
    account_id text PRIMARY KEY,
    tenant_id  text NOT NULL REFERENCES tenants (tenant_id),
    name       text NOT NULL,
    provider   text NOT NULL,
    config     jsonb NOT NULL,
    created_at bigint NOT NULL
);
CREATE INDEX provider_accounts_tenant_idx ON provider_accounts (tenant_id, created_at DESC, account_id DESC);

CREATE TABLE api_keys (
    key_id      text PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
    name        text NOT NULL,
    role        text NOT NULL CHECK (role IN ('admin', 'provider-admin', 'member', 'viewer')),
    account_id  text REFERENCES provider_accounts (account_id),
    secret_hash bytea NOT NULL UNIQUE,
    created_at  bigint NOT NULL,
    revoked_at  bigint
);
CREATE INDEX api_keys_tenant_idx ON api_keys (tenant_id, created_at DESC, key_id DESC);

CREATE TABLE pools (
    pool_id    text PRIMARY KEY,
    name       text NOT NULL,
    region     text NOT NULL,
    provider   text NOT NULL,
    account_id text NOT NULL REFERENCES provider_accounts (account_id),
    flavors    jsonb NOT NULL,
    created_at bigint NOT NULL
);

CREATE TABLE pool_offers (
    pool_id    text NOT NULL REFERENCES pools (pool_id),
    tenant_id  text NOT NULL REFERENCES tenants (tenant_id),
    offered_at bigint NOT NULL,
    PRIMARY KEY (pool_id, tenant_id)
);
CREATE INDEX pool_offers_tenant_idx ON pool_offers (tenant_id);

CREATE TABLE quotas (
    tenant_id text NOT NULL REFERENCES tenants (tenant_id),
    pool_id   text NOT NULL REFERENCES pools (pool_id),
    resource  text NOT NULL,
    max_value bigint NOT NULL CHECK (max_value >= 0),
    used      bigint NOT NULL DEFAULT 0 CHECK (used >= 0),
    PRIMARY KEY (tenant_id, pool_id, resource)
);

-- One row per (acting tenant, method, key). The row is inserted first in the
-- creating transaction, so a concurrent request with the same key waits on it
-- and then finds the object; a failed request rolls the row back with it.
CREATE TABLE idempotency_keys (
    tenant_id    text NOT NULL,
    method       text NOT NULL,
    idem_key     text NOT NULL,
    request_hash bytea NOT NULL,
    object_id    text NOT NULL,
    created_at   bigint NOT NULL,
    PRIMARY KEY (tenant_id, method, idem_key)
);

-- Per-tenant event sequence. A transaction that publishes events increments its
-- tenant's head as its last step and holds that row lock until it commits, so
-- sequence order is commit order within a tenant and a reader paging by
-- sequence can never see event n+1 before event n is visible.
CREATE TABLE event_heads (
    tenant_id text PRIMARY KEY,
    last_seq  bigint NOT NULL
);

CREATE TABLE events (
    tenant_id   text NOT NULL,
    seq         bigint NOT NULL,
    event_id    text NOT NULL UNIQUE,
    event_type  text NOT NULL,
    data        jsonb NOT NULL,
    occurred_at bigint NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);

-- The shared simulated time of BC_CLOCK=manual (one row).
CREATE TABLE manual_clock (
    id     smallint PRIMARY KEY CHECK (id = 1),
    now_ms bigint NOT NULL
);
INSERT INTO manual_clock (id, now_ms) VALUES (1, (extract(epoch FROM now()) * 1000)::bigint);
