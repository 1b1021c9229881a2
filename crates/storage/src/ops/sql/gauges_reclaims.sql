-- The reclaims under way at $1 (the product's now): borrowers interrupted
-- whose VMs are not confirmed gone, how far past its interruptAt the oldest
-- is, and how long (real time) the oldest grantee's VM step has waited for
-- borrowers to go (the steps the claim holds back, vms_step_waits.sql).
SELECT (SELECT count(*) FROM instances
         WHERE placement_kind = 'lent' AND interrupt_at IS NOT NULL
           AND state NOT IN ('deleted', 'failed'))::bigint AS pending,
       coalesce((SELECT greatest(max($1 - interrupt_at), 0) FROM instances
                  WHERE placement_kind = 'lent' AND interrupt_at IS NOT NULL
                    AND state NOT IN ('deleted', 'failed')), 0)::bigint AS overdue_ms,
       coalesce((SELECT max({DB_NOW_MS} - s.created_wall)
                   FROM vm_steps s JOIN instances i ON i.instance_id = s.instance_id
                  WHERE s.state = 'open' AND {STEP_WAITS}), 0)::bigint
         AS waiting_ms
