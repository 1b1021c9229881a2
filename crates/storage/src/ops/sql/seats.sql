-- The seated instances of a reservation (live, holding one of its slots),
-- counted per grant (NULL: on an ordinary slot or outside the grants):
-- how many the grantee's instances hold, how many borrowers hold slots it
-- lent (contract 3.14), how many hold a running slot, and how many of those
-- are on ordinary slots. The filter is `InstanceRow::seated`'s, and
-- `powered` is `InstanceRow::running`.
SELECT grant_id,
       count(*) FILTER (WHERE placement_kind <> 'lent') AS held,
       count(*) FILTER (WHERE placement_kind = 'lent') AS lent,
       count(*) FILTER (WHERE powered) AS running,
       count(*) FILTER (WHERE powered AND placement_kind = 'reservation') AS running_outside
  FROM instances
 WHERE account_id = $1 AND reservation_id = $2 AND state NOT IN ('deleted', 'failed')
 GROUP BY grant_id
