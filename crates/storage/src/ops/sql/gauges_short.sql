-- The reservations short at $1 (contract 5.4): among those with a row marked
-- short, the ones whose latest total is below the slots of their grants live
-- at $1; since the first of the trailing run of short rows.
WITH candidates AS (
    SELECT DISTINCT account_id, reservation_id FROM reservation_totals WHERE short
), latest AS (
    SELECT c.account_id, c.reservation_id, l.total
      FROM candidates c
     CROSS JOIN LATERAL (
         SELECT t.total FROM reservation_totals t
          WHERE t.account_id = c.account_id AND t.reservation_id = c.reservation_id
          ORDER BY t.at DESC LIMIT 1) l
), committed AS (
    SELECT l.account_id, l.reservation_id, l.total,
           (SELECT COALESCE(sum(g.slots), 0) FROM grants g
             WHERE g.account_id = l.account_id AND g.reservation_id = l.reservation_id
               AND g.settled_state <> 'cancelled'
               AND g.starts_at <= $1 AND g.ends_at > $1)::bigint AS committed
      FROM latest l
)
SELECT c.account_id, c.reservation_id, c.committed - c.total AS short_slots,
       COALESCE((SELECT min(t.at) FROM reservation_totals t
                  WHERE t.account_id = c.account_id AND t.reservation_id = c.reservation_id
                    AND t.short
                    AND NOT EXISTS (SELECT 1 FROM reservation_totals n
                                     WHERE n.account_id = t.account_id
                                       AND n.reservation_id = t.reservation_id
                                       AND n.at > t.at AND NOT n.short)), $1) AS since
  FROM committed c
 WHERE c.committed > c.total
 ORDER BY c.account_id, c.reservation_id
 LIMIT $2
