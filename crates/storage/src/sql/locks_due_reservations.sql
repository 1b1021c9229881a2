SELECT r.account_id, r.reservation_id FROM reservations r
WHERE EXISTS (SELECT 1 FROM grants g
   WHERE g.account_id = r.account_id AND g.reservation_id = r.reservation_id
     AND g.settled_state <> 'cancelled'
     AND g.metered_through < g.ends_at AND g.metered_through < $1)
ORDER BY r.reservation_id, r.account_id
LIMIT $2 FOR UPDATE OF r SKIP LOCKED
