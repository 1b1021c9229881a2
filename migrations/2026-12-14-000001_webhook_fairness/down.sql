DROP INDEX webhook_attempts_event_idx;
DROP INDEX webhook_deliveries_held_idx;
DROP INDEX webhook_deliveries_open_seq_idx;
DROP INDEX webhook_deliveries_open_due_idx;
DROP INDEX webhook_deliveries_ended_idx;
ALTER TABLE webhook_deliveries DROP COLUMN last_at;
ALTER TABLE webhooks DROP CONSTRAINT webhooks_secret_only_while_live;
-- An erased secret does not come back: empty values stand in for it.
UPDATE webhooks SET key_id = '', nonce = '', ciphertext = ''
WHERE key_id IS NULL OR nonce IS NULL OR ciphertext IS NULL;
ALTER TABLE webhooks
    ALTER COLUMN key_id SET NOT NULL,
    ALTER COLUMN nonce SET NOT NULL,
    ALTER COLUMN ciphertext SET NOT NULL;
