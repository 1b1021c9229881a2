DROP TABLE vm_orphans;
DROP TABLE vm_listings;
DROP TABLE vm_steps;
ALTER TABLE placement_segments DROP COLUMN billed;
DROP INDEX instances_managed_live_idx;
ALTER TABLE instances DROP CONSTRAINT instances_managed_vm;
ALTER TABLE instances DROP COLUMN deleted_reason, DROP COLUMN failure_code,
    DROP COLUMN vm_missing_at, DROP COLUMN vm_missing_seq, DROP COLUMN vm_changed_wall,
    DROP COLUMN vm_observed_at, DROP COLUMN vm_status,
    DROP COLUMN vm_reservation_id, DROP COLUMN vm_account_id, DROP COLUMN vm_zone,
    DROP COLUMN vm_name, DROP COLUMN managed, DROP COLUMN powered;
DELETE FROM placement_segments s USING instances i
    WHERE s.instance_id = i.instance_id AND i.state NOT IN ('running', 'stopped', 'deleted');
UPDATE instances SET state = 'deleted' WHERE state NOT IN ('running', 'stopped', 'deleted');
ALTER TABLE instances DROP CONSTRAINT instances_state_check;
ALTER TABLE instances ADD CONSTRAINT instances_state_check
    CHECK (state IN ('running', 'stopped', 'deleted'));
ALTER TABLE pools DROP COLUMN vm;
