-- Webhook delivery that one tenant cannot slow for the others (contract
-- 3.13 r4): secrets erased with their webhook, open deliveries ended when
-- their webhook is disabled or deleted, retention counted from a delivery's
-- last attempt, and the indexes of round-robin claims.

-- A deleted webhook keeps no secret: its sealed secrets are erased when it
-- is deleted (and a live webhook always has one).
ALTER TABLE webhooks
    ALTER COLUMN key_id DROP NOT NULL,
    ALTER COLUMN nonce DROP NOT NULL,
    ALTER COLUMN ciphertext DROP NOT NULL;

-- The webhooks of tenants deleted before now go with them.
UPDATE webhooks w
SET deleted_at = coalesce(t.deleted_at, w.updated_at),
    updated_at = coalesce(t.deleted_at, w.updated_at)
FROM tenants t
WHERE t.tenant_id = w.tenant_id AND t.state = 'deleted' AND w.deleted_at IS NULL;

UPDATE webhooks
SET key_id = NULL, nonce = NULL, ciphertext = NULL,
    old_key_id = NULL, old_nonce = NULL, old_ciphertext = NULL, old_until = NULL
WHERE deleted_at IS NOT NULL;

ALTER TABLE webhooks ADD CONSTRAINT webhooks_secret_only_while_live CHECK (
    CASE WHEN deleted_at IS NULL
         THEN key_id IS NOT NULL AND nonce IS NOT NULL AND ciphertext IS NOT NULL
         ELSE key_id IS NULL AND nonce IS NULL AND ciphertext IS NULL
              AND old_key_id IS NULL AND old_nonce IS NULL AND old_ciphertext IS NULL
    END);

-- The instant of a delivery's last attempt (or of its end without one, or
-- of its recording before its first): it is removed the retention after,
-- once delivered or failed.
ALTER TABLE webhook_deliveries ADD COLUMN last_at bigint;
UPDATE webhook_deliveries d
SET last_at = coalesce(
    (SELECT max(a.at) FROM webhook_attempts a
     WHERE a.webhook_id = d.webhook_id AND a.event_id = d.event_id),
    d.first_at);
ALTER TABLE webhook_deliveries ALTER COLUMN last_at SET NOT NULL;

-- The open deliveries of disabled or deleted webhooks end as failed.
UPDATE webhook_deliveries d
SET state = 'failed', lease_until = NULL, lease_token = NULL
FROM webhooks w
WHERE w.webhook_id = d.webhook_id AND d.state IN ('pending', 'retrying')
  AND (w.deleted_at IS NOT NULL OR w.state = 'disabled');

-- Retention: ended deliveries by their last attempt.
CREATE INDEX webhook_deliveries_ended_idx ON webhook_deliveries (last_at)
    WHERE state IN ('delivered', 'failed');
-- Claims: a webhook's open deliveries, the earliest due first and in log
-- order, and those held by a claim.
CREATE INDEX webhook_deliveries_open_due_idx ON webhook_deliveries (webhook_id, next_at)
    WHERE state IN ('pending', 'retrying');
CREATE INDEX webhook_deliveries_open_seq_idx ON webhook_deliveries (webhook_id, seq)
    WHERE state IN ('pending', 'retrying');
CREATE INDEX webhook_deliveries_held_idx ON webhook_deliveries (webhook_id, lease_until)
    WHERE state IN ('pending', 'retrying') AND lease_until IS NOT NULL;
-- A delivery's attempts, removed with it.
CREATE INDEX webhook_attempts_event_idx ON webhook_attempts (webhook_id, event_id);
