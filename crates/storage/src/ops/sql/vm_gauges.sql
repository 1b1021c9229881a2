-- The managed instances' gauges: live managed instances by state (through
-- instances_managed_live_idx), the open steps past their deadline at the
-- database's real time, and the orphans found (kept for the operator) that
-- their account's last applied listing saw, and the instances waiting for a
-- step with none open (contract 3.12 r4: there must be none).
SELECT
    count(*) FILTER (WHERE i.state = 'provisioning') AS provisioning,
    count(*) FILTER (WHERE i.state = 'running') AS running,
    count(*) FILTER (WHERE i.state = 'stopping') AS stopping,
    count(*) FILTER (WHERE i.state = 'stopped') AS stopped,
    count(*) FILTER (WHERE i.state = 'starting') AS starting,
    count(*) FILTER (WHERE i.state = 'deleting') AS deleting,
    (SELECT count(*) FROM vm_steps s
      WHERE s.state = 'open' AND s.deadline_wall < {DB_NOW_MS}) AS steps_overdue,
    (SELECT count(*) FROM vm_orphans o
      JOIN vm_listings l ON l.account_id = o.account_id
      WHERE o.found_at IS NOT NULL AND o.last_seq = l.listing_seq) AS orphans_found,
    count(*) FILTER (
      WHERE i.state IN ('provisioning', 'stopping', 'starting', 'deleting')
        AND NOT EXISTS (SELECT 1 FROM vm_steps s
                        WHERE s.instance_id = i.instance_id AND s.state = 'open')
    ) AS without_step
FROM instances i
WHERE i.managed AND i.state NOT IN ('deleted', 'failed')
