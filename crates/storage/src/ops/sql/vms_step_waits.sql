-- Whether the step s of instance i waits for borrowers (contract 3.14): a
-- grantee's VM that takes a lent slot back is sent (created or started)
-- only once the VMs in its grant fit the grant's slots, that is once the
-- interrupted borrowers' VMs are confirmed gone.
(s.kind IN ('create', 'start') AND s.operation IS NULL
 AND i.placement_kind = 'grant'
 AND EXISTS (SELECT 1 FROM instances b
             WHERE b.grant_id = i.grant_id AND b.placement_kind = 'lent'
               AND b.state NOT IN ('deleted', 'failed'))
 AND (SELECT count(*) FROM instances o
      WHERE o.grant_id = i.grant_id AND o.state NOT IN ('deleted', 'failed'))
     > (SELECT g.slots FROM grants g WHERE g.grant_id = i.grant_id))
