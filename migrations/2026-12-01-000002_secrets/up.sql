-- The secret store (contract 3.9): a tenant's named secrets, encrypted with
-- AES-256-GCM under the key whose id is recorded; the tenant id and name are
-- the associated data, so a ciphertext moved to another row does not decrypt.
-- No column holds a value in the clear.
CREATE TABLE secrets (
    tenant_id   text   NOT NULL REFERENCES tenants (tenant_id),
    name        text   NOT NULL CHECK (name ~ '^[a-z][a-z0-9-]{0,62}$'),
    kind        text   NOT NULL CHECK (kind IN ('service-account', 'token')),
    -- The first 16 hex digits of the SHA-256 of the value.
    fingerprint text   NOT NULL,
    -- The first 8 hex digits of the SHA-256 of the key it is encrypted under.
    key_id      text   NOT NULL,
    nonce       bytea  NOT NULL CHECK (octet_length(nonce) = 12),
    ciphertext  bytea  NOT NULL,
    created_at  bigint NOT NULL,
    updated_at  bigint NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
