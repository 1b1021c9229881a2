SELECT b AS bucket,
       sum(least(s_to, b + $6) - greatest(s_from, b))::bigint AS held_ms,
       coalesce(sum(least(s_to, b + $6) - greatest(s_from, b))
                FILTER (WHERE running AND billed), 0)::bigint AS running_ms
FROM (SELECT greatest(from_ms, $4) AS s_from, least(to_ms, $5) AS s_to, running, billed
      FROM placement_segments
      WHERE account_id = $1 AND reservation_id = $2 AND grant_id = $3 AND kind <> 'lent'
        AND to_ms IS NOT NULL AND from_ms < $5 AND to_ms > $4) s
CROSS JOIN LATERAL generate_series(s_from - (s_from - $4) % $6, s_to - 1, $6) AS b
GROUP BY b ORDER BY b
