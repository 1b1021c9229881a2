-- Lending idle granted slots (contract 3.14, 5.5 r4): a managed pool's
-- notice, a grant's lending, interruptible instances placed on lent slots
-- (placement kind 'lent', in the lending grant) and their interruption.

-- Seconds of notice a borrower gets before its VM is deleted; NULL: the
-- pool's grants cannot lend.
ALTER TABLE pools ADD COLUMN lending_notice_s integer
    CHECK (lending_notice_s BETWEEN 0 AND 3600);
ALTER TABLE pools ADD CONSTRAINT pools_lending_managed
    CHECK (lending_notice_s IS NULL OR vm IS NOT NULL);

ALTER TABLE grants ADD COLUMN lending boolean NOT NULL DEFAULT false;
-- `vm.grant.lent.hours` written so far, in micro-slot-hours (`lentSlotHours`).
ALTER TABLE grants ADD COLUMN lent_micro bigint NOT NULL DEFAULT 0 CHECK (lent_micro >= 0);

ALTER TABLE instances ADD COLUMN interruptible boolean NOT NULL DEFAULT false;
-- When it took its lent slot: the borrower that came last is interrupted first.
ALTER TABLE instances ADD COLUMN lent_at bigint;
-- While an interruption is pending: when its VM will be deleted.
ALTER TABLE instances ADD COLUMN interrupt_at bigint;
ALTER TABLE instances ADD CONSTRAINT instances_interrupt_only_borrowers
    CHECK (interrupt_at IS NULL OR interruptible);
ALTER TABLE instances ADD CONSTRAINT instances_lent_only_interruptible
    CHECK (placement_kind <> 'lent' OR (interruptible AND lent_at IS NOT NULL));

ALTER TABLE instances DROP CONSTRAINT instances_placement_kind_check;
ALTER TABLE instances ADD CONSTRAINT instances_placement_kind_check
    CHECK (placement_kind IN ('grant', 'lent', 'reservation', 'ondemand', 'none'));
ALTER TABLE instances DROP CONSTRAINT instances_check;
ALTER TABLE instances ADD CONSTRAINT instances_check
    CHECK ((placement_kind IN ('grant', 'lent')) = (grant_id IS NOT NULL));
ALTER TABLE instances DROP CONSTRAINT instances_check1;
ALTER TABLE instances ADD CONSTRAINT instances_check1
    CHECK ((placement_kind IN ('grant', 'lent', 'reservation')) = (reservation_id IS NOT NULL));
ALTER TABLE instances DROP CONSTRAINT instances_deleted_reason_check;
ALTER TABLE instances ADD CONSTRAINT instances_deleted_reason_check
    CHECK (deleted_reason IN ('requested', 'lost', 'tenant-deleted', 'reclaimed'));

ALTER TABLE placement_segments DROP CONSTRAINT placement_segments_kind_check;
ALTER TABLE placement_segments ADD CONSTRAINT placement_segments_kind_check
    CHECK (kind IN ('grant', 'lent', 'reservation', 'ondemand', 'none'));

-- The live borrowers of a grant, read by every placement and reclaim.
CREATE INDEX instances_borrowers ON instances (grant_id, lent_at)
    WHERE placement_kind = 'lent';
-- Interruptions due, read by the worker's reclaim pass.
CREATE INDEX instances_interrupt_due ON instances (interrupt_at)
    WHERE interrupt_at IS NOT NULL;
-- The borrowers' stretches in a grant, read by its metering.
CREATE INDEX placement_segments_lent ON placement_segments (grant_id, from_ms)
    WHERE kind = 'lent';
