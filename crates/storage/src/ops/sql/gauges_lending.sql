-- Per pool whose grants lend or lent: the slots borrowers hold now (not
-- being interrupted) and the lent slot-hours written so far, the first $1
-- pools by id.
SELECT g.pool_id,
       coalesce(sum(b.lent), 0)::bigint AS lent,
       sum(g.lent_micro)::bigint AS micros
  FROM grants g
  LEFT JOIN LATERAL (
    SELECT count(*) AS lent FROM instances i
     WHERE i.grant_id = g.grant_id AND i.placement_kind = 'lent'
       AND i.interrupt_at IS NULL AND i.state NOT IN ('deleted', 'failed')) b ON g.lending
 WHERE g.lending OR g.lent_micro > 0
 GROUP BY g.pool_id
 ORDER BY g.pool_id
 LIMIT $1
