-- Signed webhooks (contract 3.13): a tenant's events pushed to its endpoint.

CREATE TABLE webhooks (
    webhook_id    text PRIMARY KEY,
    tenant_id     text NOT NULL REFERENCES tenants (tenant_id),
    url           text NOT NULL,
    -- The event types sent; NULL: every type of the tenant's.
    types         text[],
    description   text,
    state         text NOT NULL CHECK (state IN ('enabled', 'disabled')),
    -- The signing secret, sealed as secrets are (3.9), the webhook's id as
    -- its name; the one it replaced signs too until old_until.
    key_id        text NOT NULL,
    nonce         bytea NOT NULL,
    ciphertext    bytea NOT NULL,
    old_key_id    text,
    old_nonce     bytea,
    old_ciphertext bytea,
    old_until     bigint,
    -- The tenant's event log position it was created (or enabled again) at:
    -- only later events are sent.
    from_seq      bigint NOT NULL,
    -- The log position up to which its deliveries are recorded.
    scanned_seq   bigint NOT NULL,
    -- The first instant of the run of failures it is in (NULL: none).
    failing_since bigint,
    created_at    bigint NOT NULL,
    updated_at    bigint NOT NULL,
    deleted_at    bigint
);
CREATE INDEX webhooks_tenant_idx ON webhooks (tenant_id, created_at) WHERE deleted_at IS NULL;

-- One row per (webhook, event) to send: its first attempt in log order, its
-- retries on their schedule.
CREATE TABLE webhook_deliveries (
    webhook_id    text NOT NULL REFERENCES webhooks (webhook_id),
    seq           bigint NOT NULL,
    event_id      text NOT NULL,
    event_type    text NOT NULL,
    state         text NOT NULL CHECK (state IN ('pending', 'retrying', 'delivered', 'failed')),
    attempts      integer NOT NULL DEFAULT 0,
    -- The product's clock: when the next attempt is due.
    next_at       bigint NOT NULL,
    first_at      bigint NOT NULL,
    -- The claim of the replica sending it (real time, epoch ms).
    lease_until   bigint,
    lease_token   text,
    PRIMARY KEY (webhook_id, seq)
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_at, webhook_id, seq)
    WHERE state IN ('pending', 'retrying');

-- Every attempt, as `webhooks.deliveries` shows it.
CREATE TABLE webhook_attempts (
    attempt_seq   bigserial PRIMARY KEY,
    delivery_id   text NOT NULL UNIQUE,
    webhook_id    text NOT NULL REFERENCES webhooks (webhook_id),
    event_id      text NOT NULL,
    event_type    text NOT NULL,
    attempt       integer NOT NULL,
    at            bigint NOT NULL,
    outcome       text NOT NULL CHECK (outcome IN ('delivered', 'retrying', 'failed')),
    status        integer,
    duration_ms   bigint NOT NULL,
    next_attempt_at bigint
);
CREATE INDEX webhook_attempts_webhook_idx ON webhook_attempts (webhook_id, attempt_seq);
