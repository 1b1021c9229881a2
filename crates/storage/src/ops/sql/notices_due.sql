SELECT g.account_id, g.reservation_id FROM grants g
WHERE g.settled_state IN ('scheduled', 'active')
  AND g.starts_at <= $1 AND g.ends_at > $1 AND g.ends_at <= $1 + $3
  AND EXISTS (SELECT 1 FROM unnest($2::bigint[]) AS n(ms)
      WHERE g.ends_at - n.ms <= $1 AND g.ends_at - n.ms >= g.starts_at
        AND NOT EXISTS (SELECT 1 FROM grant_expiry_notices e
            WHERE e.grant_id = g.grant_id AND e.before_ms = n.ms))
UNION
SELECT g.account_id, g.reservation_id FROM grants g
WHERE $4 AND g.settled_state IN ('scheduled', 'active')
  AND g.starts_at <= $5 - $6 AND g.ends_at > $1
  AND NOT EXISTS (SELECT 1 FROM grant_underuse_checks u
      WHERE u.grant_id = g.grant_id AND u.checked_to >= $5)
ORDER BY reservation_id, account_id
