INSERT INTO grant_underuse_checks AS c (grant_id, checked_to, reported_to)
VALUES ($1, $2, CASE WHEN $3 THEN $2 END)
ON CONFLICT (grant_id) DO UPDATE SET
  checked_to = EXCLUDED.checked_to,
  reported_to = CASE
    WHEN $3 AND (c.reported_to IS NULL OR c.reported_to <= EXCLUDED.checked_to - $4)
    THEN EXCLUDED.checked_to ELSE c.reported_to END
WHERE c.checked_to < EXCLUDED.checked_to
RETURNING reported_to
