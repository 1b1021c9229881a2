SELECT instance_id, min(from_ms) AS from_ms, max(to_ms) AS to_ms,
       bool_or(running) AS running, min(grant_id) AS grant_id
FROM (SELECT *, count(*) FILTER (WHERE NOT joins)
          OVER (PARTITION BY instance_id ORDER BY from_ms) AS span
      FROM (SELECT *, coalesce(lag(to_ms) OVER w = from_ms
                               AND lag(part) OVER w = part, false) AS joins
            FROM ({segments}) s
            WINDOW w AS (PARTITION BY instance_id ORDER BY from_ms)) j) k
GROUP BY instance_id, span
ORDER BY instance_id, min(from_ms)
