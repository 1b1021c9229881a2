-- The reclaims under way at $1 (the product's now): borrowers interrupted
-- whose VMs are not confirmed gone, how far past its interruptAt the oldest
-- is, and how long (real time) the oldest grantee's VM step has waited for
-- borrowers to go (a create or start in a grant that holds more VMs than
-- its slots).
SELECT (SELECT count(*) FROM instances
         WHERE placement_kind = 'lent' AND interrupt_at IS NOT NULL
           AND state NOT IN ('deleted', 'failed'))::bigint AS pending,
       coalesce((SELECT greatest(max($1 - interrupt_at), 0) FROM instances
                  WHERE placement_kind = 'lent' AND interrupt_at IS NOT NULL
                    AND state NOT IN ('deleted', 'failed')), 0)::bigint AS overdue_ms,
       coalesce((SELECT max({DB_NOW_MS} - s.created_wall)
                   FROM vm_steps s JOIN instances i ON i.instance_id = s.instance_id
                  WHERE s.state = 'open' AND s.kind IN ('create', 'start')
                    AND s.operation IS NULL AND i.placement_kind = 'grant'
                    AND EXISTS (SELECT 1 FROM instances b
                                 WHERE b.grant_id = i.grant_id AND b.placement_kind = 'lent'
                                   AND b.state NOT IN ('deleted', 'failed'))), 0)::bigint
         AS waiting_ms
