WITH due AS (
  SELECT s.step_id
  FROM vm_steps s
  WHERE s.state = 'open'
    AND s.due_wall <= {DB_NOW_MS}
    AND (s.lease_until IS NULL OR s.lease_until < {DB_NOW_MS})
    AND NOT EXISTS (
      SELECT 1 FROM vm_steps p
      WHERE p.instance_id = s.instance_id AND p.state = 'open' AND p.step_id < s.step_id)
  ORDER BY s.due_wall, s.step_id
  LIMIT $1
  FOR UPDATE SKIP LOCKED
)
UPDATE vm_steps s
SET lease_until = {DB_NOW_MS} + $2,
    lease_token = $3 || '/' || s.step_id,
    deadline_wall = CASE WHEN s.operation IS NULL AND s.attempts = 0 AND s.lease_token IS NULL
                         THEN s.created_wall + $4 ELSE s.deadline_wall END
FROM due
WHERE s.step_id = due.step_id
RETURNING s.step_id, s.instance_id, s.kind, s.request_id, s.zone, s.zone_index, s.operation,
          s.attempts, s.created_wall, s.deadline_wall, s.lease_token
