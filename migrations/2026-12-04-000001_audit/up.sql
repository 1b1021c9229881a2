-- The audit trail (contract 3.11, r2): one row per mutation call that
-- authenticated, written by the api-server in a transaction of its own
-- after the call answered (so refused and failed calls are recorded too).
-- No bodies and no secrets: who (the key and its tenant), what (the method
-- and the ids it named or created), how it ended, when, and the request id.
-- No foreign keys: records outlive the tenants and keys they name.
CREATE TABLE audit_records (
    audit_id   text PRIMARY KEY,
    at         bigint NOT NULL,
    tenant_id  text NOT NULL,
    key_id     text NOT NULL,
    method     text NOT NULL,
    object_ids jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(object_ids) = 'array'),
    outcome    text NOT NULL CHECK (outcome IN ('ok', 'denied', 'replayed', 'failed')),
    code       text,
    request_id text NOT NULL,
    -- A code exactly when the call was refused or failed.
    CHECK ((outcome IN ('ok', 'replayed')) = (code IS NULL))
);

-- audit.list pages oldest first by (at, audit_id): a tenant's own records,
-- or every tenant's (root, all).
CREATE INDEX audit_records_tenant_at_idx ON audit_records (tenant_id, at, audit_id);
CREATE INDEX audit_records_at_idx ON audit_records (at, audit_id);
