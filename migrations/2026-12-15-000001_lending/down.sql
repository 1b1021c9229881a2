DROP INDEX placement_segments_lent;
DROP INDEX instances_interrupt_due;
DROP INDEX instances_borrowers;
DELETE FROM placement_segments WHERE kind = 'lent';
ALTER TABLE placement_segments DROP CONSTRAINT placement_segments_kind_check;
ALTER TABLE placement_segments ADD CONSTRAINT placement_segments_kind_check
    CHECK (kind IN ('grant', 'reservation', 'ondemand', 'none'));
UPDATE instances SET placement_kind = 'none', grant_id = NULL, account_id = NULL,
    reservation_id = NULL WHERE placement_kind = 'lent';
UPDATE instances SET deleted_reason = 'requested'
    WHERE deleted_reason = 'reclaimed';
ALTER TABLE instances DROP CONSTRAINT instances_deleted_reason_check;
ALTER TABLE instances ADD CONSTRAINT instances_deleted_reason_check
    CHECK (deleted_reason IN ('requested', 'lost', 'tenant-deleted'));
ALTER TABLE instances DROP CONSTRAINT instances_check1;
ALTER TABLE instances ADD CONSTRAINT instances_check1
    CHECK ((placement_kind IN ('grant', 'reservation')) = (reservation_id IS NOT NULL));
ALTER TABLE instances DROP CONSTRAINT instances_check;
ALTER TABLE instances ADD CONSTRAINT instances_check
    CHECK ((placement_kind = 'grant') = (grant_id IS NOT NULL));
ALTER TABLE instances DROP CONSTRAINT instances_placement_kind_check;
ALTER TABLE instances ADD CONSTRAINT instances_placement_kind_check
    CHECK (placement_kind IN ('grant', 'reservation', 'ondemand', 'none'));
ALTER TABLE instances DROP CONSTRAINT instances_lent_only_interruptible;
ALTER TABLE instances DROP CONSTRAINT instances_interrupt_only_borrowers;
ALTER TABLE instances DROP COLUMN interrupt_at;
ALTER TABLE instances DROP COLUMN lent_at;
ALTER TABLE instances DROP COLUMN interruptible;
ALTER TABLE grants DROP COLUMN lent_micro;
ALTER TABLE grants DROP COLUMN lending;
ALTER TABLE pools DROP CONSTRAINT pools_lending_managed;
ALTER TABLE pools DROP COLUMN lending_notice_s;
