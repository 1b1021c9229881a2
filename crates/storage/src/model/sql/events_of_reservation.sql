SELECT occurred_at, event_type, data->>'grantId' AS grant_id, tenant_id, seq
FROM events
WHERE tenant_id = ANY($1) AND event_type LIKE 'reservation-grant.%'
  AND event_type IN ('reservation-grant.created', 'reservation-grant.active',
    'reservation-grant.ended', 'reservation-grant.cancelled')
  AND data->>'grantId' = ANY($2) AND occurred_at >= $3 AND occurred_at < $4
UNION ALL
SELECT occurred_at, event_type, NULL::text AS grant_id, tenant_id, seq FROM events
WHERE tenant_id = $5 AND event_type = 'reservation-grant.capacity-short'
  AND data->>'reservationId' = $6 AND data->>'accountId' = $7
  AND occurred_at >= $3 AND occurred_at < $4
ORDER BY occurred_at, tenant_id, seq
