-- Claims up to $1 due steps for $2 ms with the token $3: each the oldest open
-- step of its instance, taken round-robin across tenants (each tenant's
-- oldest due step first, then each one's second, ...), so one tenant's backlog
-- never delays another tenant's step by more than one step of each tenant.
-- A step that will call the provider to send (no operation yet) counts
-- against its account's allowance: the accounts in $4 may send at most $5
-- (the same position) each, what their write budget and concurrent
-- operations allow now (0 while a quota pauses them); any other account at
-- most $6, a full minute's budget. They are taken in the same round-robin
-- order, so the few steps an account may send are each tenant's turn, not
-- whichever step reaches the budget first. The others stay where they are.
-- A step that only looks at its operation is never held back. A grantee's
-- VM waiting for borrowers to go (vms_step_waits.sql) is not due yet.
WITH due AS (
  SELECT s.step_id, s.due_wall, pl.account_id, s.operation IS NULL AS sends,
         row_number() OVER (PARTITION BY i.tenant_id ORDER BY s.due_wall, s.step_id) AS turn
  FROM vm_steps s
  JOIN instances i ON i.instance_id = s.instance_id
  JOIN pools pl ON pl.pool_id = i.pool_id
  WHERE s.state = 'open'
    AND s.due_wall <= {DB_NOW_MS}
    AND (s.lease_until IS NULL OR s.lease_until < {DB_NOW_MS})
    AND NOT EXISTS (
      SELECT 1 FROM vm_steps p
      WHERE p.instance_id = s.instance_id AND p.state = 'open' AND p.step_id < s.step_id)
    AND NOT {STEP_WAITS}
),
ranked AS (
  SELECT d.*,
         row_number() OVER (PARTITION BY d.account_id, d.sends
                            ORDER BY d.turn, d.due_wall, d.step_id) AS account_turn
  FROM due d
  WHERE d.turn <= $1
),
allowed AS (
  SELECT r.step_id, r.turn, r.due_wall
  FROM ranked r
  LEFT JOIN unnest($4::text[], $5::int[]) AS a(account_id, n) ON a.account_id = r.account_id
  WHERE NOT r.sends OR r.account_turn <= COALESCE(a.n, $6)
),
picked AS (
  SELECT s.step_id
  FROM vm_steps s
  JOIN allowed d ON d.step_id = s.step_id
  -- Checked again on the locked row (another replica may have claimed it
  -- since the snapshot above was read).
  WHERE s.state = 'open'
    AND s.due_wall <= {DB_NOW_MS}
    AND (s.lease_until IS NULL OR s.lease_until < {DB_NOW_MS})
  ORDER BY d.turn, d.due_wall, s.step_id
  LIMIT $1
  FOR UPDATE OF s SKIP LOCKED
)
UPDATE vm_steps s
SET lease_until = {DB_NOW_MS} + $2,
    lease_token = $3 || '/' || s.step_id
FROM picked
WHERE s.step_id = picked.step_id
RETURNING s.step_id, s.instance_id, s.kind, s.request_id, s.zone, s.zone_index, s.operation,
          s.attempts, s.created_wall, s.sent_wall, s.lease_token
