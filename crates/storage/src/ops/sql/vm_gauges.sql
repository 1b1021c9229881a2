-- The managed instances' gauges: live managed instances by state (through
-- instances_managed_live_idx) and the open steps past their deadline at the
-- database's real time.
SELECT
    count(*) FILTER (WHERE i.state = 'provisioning') AS provisioning,
    count(*) FILTER (WHERE i.state = 'running') AS running,
    count(*) FILTER (WHERE i.state = 'stopping') AS stopping,
    count(*) FILTER (WHERE i.state = 'stopped') AS stopped,
    count(*) FILTER (WHERE i.state = 'starting') AS starting,
    count(*) FILTER (WHERE i.state = 'deleting') AS deleting,
    (SELECT count(*) FROM vm_steps s
      WHERE s.state = 'open' AND s.deadline_wall < {DB_NOW_MS}) AS steps_overdue
FROM instances i
WHERE i.managed AND i.state NOT IN ('deleted', 'failed')
