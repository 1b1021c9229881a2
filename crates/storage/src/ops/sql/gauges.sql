WITH each AS (
SELECT r.account_id, r.reservation_id, r.total,
  coalesce(g.granted, 0) AS granted, coalesce(g.scheduled, 0) AS scheduled,
  coalesce(g.active, 0) AS active, coalesce(i.held, 0) AS held,
  coalesce(i.ordinary, 0) AS ordinary,
  greatest(coalesce(i.running, 0), r.provider_in_use) AS physical,
  count(*) OVER () AS bound,
  row_number() OVER (ORDER BY r.account_id, r.reservation_id) AS n
FROM reservations r
LEFT JOIN LATERAL (
  SELECT sum(slots) FILTER (WHERE starts_at <= $1 AND ends_at > $1)::bigint AS granted,
         count(*) FILTER (WHERE starts_at > $1) AS scheduled,
         count(*) FILTER (WHERE starts_at <= $1 AND ends_at > $1) AS active
  FROM grants WHERE account_id = r.account_id AND reservation_id = r.reservation_id
    AND settled_state IN ('scheduled', 'active')) g ON true
LEFT JOIN LATERAL (
  SELECT count(*) FILTER (WHERE grant_id IS NOT NULL) AS held,
         count(*) FILTER (WHERE grant_id IS NULL AND powered) AS ordinary,
         count(*) FILTER (WHERE powered) AS running
  FROM instances WHERE account_id = r.account_id AND reservation_id = r.reservation_id
    AND state <> 'deleted') i ON true
WHERE r.pool_id IS NOT NULL AND r.status <> 'gone')
SELECT CASE WHEN n <= $2 THEN account_id ELSE $3 END AS account_id,
  CASE WHEN n <= $2 THEN reservation_id ELSE $3 END AS reservation_id,
  sum(total)::bigint AS total, sum(granted)::bigint AS granted,
  sum(scheduled)::bigint AS scheduled, sum(active)::bigint AS active,
  sum(held)::bigint AS held, sum(ordinary)::bigint AS ordinary,
  sum(physical)::bigint AS physical, max(bound) AS bound
FROM each GROUP BY 1, 2 ORDER BY min(n)
