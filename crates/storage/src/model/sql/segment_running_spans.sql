SELECT instance_id, from_ms, to_ms, running, grant_id,
       (grant_id IS NULL)::text AS part
FROM placement_segments
WHERE account_id = $1 AND reservation_id = $2 AND running
  AND to_ms IS NOT NULL AND from_ms < $4 AND to_ms > $3
