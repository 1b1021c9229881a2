-- Deficit credits (contract 5.4): the history of each reservation's total as
-- the scans saw it, and each grant's credited slot-hours so far.

-- One row per change of a reservation's total, at the instant of the scan
-- that saw it (never inside an hour bucket already metered). Before the
-- first row, the first row's total holds. Rows are kept while a grant that
-- is not fully metered may need them.
CREATE TABLE reservation_totals (
    account_id     text NOT NULL,
    reservation_id text NOT NULL,
    at             bigint NOT NULL,
    total          bigint NOT NULL CHECK (total >= 0),
    -- Whether the total was below the peak of the reservation's scheduled and
    -- active grants from `at` on when it was seen: only then can the
    -- reservation be short until the next row (grants created later fit the
    -- total), so metering reads the history only of reservations with one.
    short          boolean NOT NULL,
    PRIMARY KEY (account_id, reservation_id, at),
    FOREIGN KEY (account_id, reservation_id)
        REFERENCES reservations (account_id, reservation_id) ON DELETE CASCADE
);
CREATE INDEX reservation_totals_short_idx
    ON reservation_totals (account_id, reservation_id) WHERE short;

-- Every reservation starts its history with its total as last scanned; it is
-- marked short unless its total covers every grant that has not ended (a
-- bound on their peak), so metering checks it exactly.
INSERT INTO reservation_totals (account_id, reservation_id, at, total, short)
SELECT r.account_id, r.reservation_id, r.last_scanned_at, r.total,
       r.status <> 'gone' AND r.total < COALESCE((
           SELECT sum(g.slots) FROM grants g
            WHERE g.account_id = r.account_id AND g.reservation_id = r.reservation_id
              AND g.settled_state <> 'cancelled' AND g.ends_at > r.last_scanned_at), 0)
  FROM reservations r;

-- The grant's `vm.grant.deficit.hours` written so far, in micro-slot-hours
-- (`reservationGrants.get` `deficitSlotHours`).
ALTER TABLE grants
    ADD COLUMN deficit_micro bigint NOT NULL DEFAULT 0 CHECK (deficit_micro >= 0);
-- The credited grants, for the per-pool gauge.
CREATE INDEX grants_credited_idx ON grants (pool_id) WHERE deficit_micro > 0;
