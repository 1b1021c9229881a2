-- The peak of a reservation's committed step function over [$3, $4): the
-- level at the start (the last step at or before it) and every step inside.
SELECT GREATEST(
  COALESCE((SELECT committed FROM reservation_steps
             WHERE account_id = $1 AND reservation_id = $2 AND at <= $3
             ORDER BY at DESC LIMIT 1), 0),
  COALESCE((SELECT max(committed) FROM reservation_steps
             WHERE account_id = $1 AND reservation_id = $2 AND at > $3 AND at < $4), 0)
) AS peak
