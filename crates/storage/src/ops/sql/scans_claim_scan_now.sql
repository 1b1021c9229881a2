WITH old AS (
  SELECT account_id, scan_lease_until AS lease, scan_claimed_at AS claimed,
         {DB_NOW_MS} AS now
  FROM provider_accounts WHERE account_id = $1 FOR UPDATE)
UPDATE provider_accounts p SET scan_seq = p.scan_seq + 1,
   scan_lease_until = CASE WHEN old.lease IS NULL OR old.lease <= old.now
       THEN old.now + $2 ELSE old.lease END,
   scan_claimed_at = old.now
FROM old
WHERE p.account_id = old.account_id
  AND ($4 OR old.lease IS NULL OR old.lease <= old.now)
  AND ($4 OR old.claimed IS NULL OR $3 <= 0 OR old.claimed + $3 <= old.now)
RETURNING p.scan_seq,
  CASE WHEN old.lease IS NULL OR old.lease <= old.now
       THEN p.scan_lease_until END AS lease_until
