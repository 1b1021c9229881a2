-- Claims the due deliveries (by the product's clock, $6) of up to $1
-- webhooks, at most $2 each in log order, for $3 ms of real time, each
-- webhook's under the token $4 || '/' || its id. A webhook is taken only
-- when no claim (of any replica) holds one of its deliveries, so it sends
-- one attempt at a time; webhooks are taken round-robin across tenants
-- (each tenant's webhook with the oldest due delivery first, then each
-- one's second, ...), and a tenant never holds more than $5 webhooks at
-- once, whoever claimed them. The caller holds the claims' advisory lock,
-- so the held webhooks counted here are every claim committed.
WITH held AS (
  SELECT DISTINCT d.webhook_id
  FROM webhook_deliveries d
  WHERE d.state IN ('pending', 'retrying')
    AND d.lease_until IS NOT NULL AND d.lease_until > {DB_NOW_MS}
),
held_per_tenant AS (
  SELECT w.tenant_id, count(*) AS n
  FROM held h JOIN webhooks w ON w.webhook_id = h.webhook_id
  GROUP BY w.tenant_id
),
ready AS (
  SELECT w.webhook_id, w.tenant_id, due.next_at AS oldest,
         row_number() OVER (PARTITION BY w.tenant_id
                            ORDER BY due.next_at, w.webhook_id) AS turn
  FROM webhooks w
  CROSS JOIN LATERAL (
    SELECT d.next_at FROM webhook_deliveries d
    WHERE d.webhook_id = w.webhook_id AND d.state IN ('pending', 'retrying')
      AND d.next_at <= $6
    ORDER BY d.next_at LIMIT 1) due
  WHERE w.deleted_at IS NULL AND w.state = 'enabled'
    AND NOT EXISTS (SELECT 1 FROM held h WHERE h.webhook_id = w.webhook_id)
),
picked AS (
  SELECT r.webhook_id, r.tenant_id
  FROM ready r
  LEFT JOIN held_per_tenant t ON t.tenant_id = r.tenant_id
  WHERE r.turn <= $5 - coalesce(t.n, 0)
  ORDER BY r.turn, r.oldest, r.webhook_id
  LIMIT $1
),
due AS (
  SELECT p.tenant_id, d.webhook_id, d.seq
  FROM picked p
  CROSS JOIN LATERAL (
    SELECT d.webhook_id, d.seq FROM webhook_deliveries d
    WHERE d.webhook_id = p.webhook_id AND d.state IN ('pending', 'retrying')
      AND d.next_at <= $6
    ORDER BY d.seq LIMIT $2) d
)
UPDATE webhook_deliveries d
SET lease_until = {DB_NOW_MS} + $3,
    lease_token = $4 || '/' || d.webhook_id
FROM due
WHERE d.webhook_id = due.webhook_id AND d.seq = due.seq
  AND d.state IN ('pending', 'retrying')
RETURNING due.tenant_id, d.webhook_id, d.seq, d.event_id, d.event_type, d.attempts,
          d.first_at, d.lease_token
