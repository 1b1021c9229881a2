-- The key that seals usage.list cursors (contract 1.6): a cursor carries the
-- platform-wide position of a usage record, encrypted with this key and bound
-- to its reader, so comparing two of a tenant's cursors tells nothing of the
-- records other tenants got in between. 32 random bytes from two UUIDv4s
-- (PostgreSQL's strong random source, 244 random bits), made once per
-- database: every api-server replica reads the same key.
CREATE TABLE cursor_keys (
    id  smallint PRIMARY KEY CHECK (id = 1),
    key bytea NOT NULL CHECK (length(key) = 32)
);
INSERT INTO cursor_keys (id, key) VALUES (
    1,
    decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex')
);
