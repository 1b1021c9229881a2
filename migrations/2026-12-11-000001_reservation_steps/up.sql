-- The committed step function of every reservation, kept as rows: the
-- capacity check of `reservationGrants.create` (contract 3.6) reads the peak
-- of the slots committed over a term from the steps inside it, whatever the
-- number of grants that overlap it.
--
-- A row says: from `at` until the reservation's next row, `committed` slots
-- are committed to non-cancelled grants (each over `[starts_at, ends_at)`).
-- Before a reservation's first row nothing is committed, and its last row is
-- always 0 (terms are finite). The rows are normalized: no row has the level
-- of the row before it (nor 0 as a first row), so a reservation with no
-- committed grant has no rows.
--
-- Triggers on `grants` keep the rows exact on every insert, delete and
-- change of a grant's term, slots or cancellation, in the statement that
-- makes it, so no writer (the API, settlement, tests' and the bench's own
-- SQL) can leave them behind. Every writer of a reservation's grants holds
-- the reservation's row lock (storage::locks, order 4), which also
-- serializes the step writes of one reservation.
CREATE TABLE reservation_steps (
    account_id     text NOT NULL,
    reservation_id text NOT NULL,
    at             bigint NOT NULL,
    committed      bigint NOT NULL CHECK (committed >= 0),
    PRIMARY KEY (account_id, reservation_id, at)
);

-- Applies changes of the committed slots, given as (account, reservation,
-- instant, change) with every grant's +slots at its start and -slots at its
-- end (so the changes of one reservation sum to 0 and rows after its last
-- changed instant keep their level). One set-based statement, whatever the
-- number of grants changed in one statement: the new level at every changed
-- instant and at every row between a reservation's first and last changed
-- instant, each compared with the new level before it (the row before the
-- first changed instant, or 0); a changed instant whose level repeats the
-- one before it has no row (the only rows that can come to repeat it), and
-- every other row whose level changes is written once.
-- Its statement is planned once per session (`force_generic_plan`): a custom
-- plan per call cost more than running it, under the reservation's lock.
CREATE FUNCTION reservation_steps_apply(accs text[], ress text[], ats bigint[], deltas bigint[])
RETURNS void LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    WITH d AS MATERIALIZED (
        SELECT acc, res, at, sum(delta) AS delta
          FROM unnest(accs, ress, ats, deltas) AS u (acc, res, at, delta)
         GROUP BY acc, res, at HAVING sum(delta) <> 0),
    b AS (SELECT acc, res, min(at) AS lo, max(at) AS hi FROM d GROUP BY acc, res),
    -- Each changed instant with the level there before the change, the rows
    -- between the first and the last changed instant, and the row before
    -- the first (unchanged).
    m AS (
        SELECT d.acc, d.res, d.at, d.delta AS x, true AS changed,
               COALESCE((SELECT r.committed FROM reservation_steps r
                          WHERE r.account_id = d.acc AND r.reservation_id = d.res
                            AND r.at <= d.at
                          ORDER BY r.at DESC LIMIT 1), 0) AS base
          FROM d
        UNION ALL
        SELECT r.account_id, r.reservation_id, r.at, 0, false, r.committed
          FROM reservation_steps r
          JOIN b ON r.account_id = b.acc AND r.reservation_id = b.res
                AND r.at > b.lo AND r.at < b.hi
         WHERE NOT EXISTS (SELECT 1 FROM d WHERE d.acc = r.account_id
                              AND d.res = r.reservation_id AND d.at = r.at)
        UNION ALL
        SELECT b.acc, b.res, p.at, 0, false, p.committed
          FROM b CROSS JOIN LATERAL (
              SELECT r.at, r.committed FROM reservation_steps r
               WHERE r.account_id = b.acc AND r.reservation_id = b.res AND r.at < b.lo
               ORDER BY r.at DESC LIMIT 1) p),
    n AS (
        SELECT acc, res, at, changed,
               base + sum(x) OVER (PARTITION BY acc, res ORDER BY at) AS level,
               sum(x) OVER (PARTITION BY acc, res ORDER BY at) AS change
          FROM m),
    l AS (
        SELECT acc, res, at, changed, level, change,
               COALESCE(lag(level) OVER (PARTITION BY acc, res ORDER BY at), 0) AS before
          FROM n),
    gone AS (
        DELETE FROM reservation_steps r USING l
         WHERE l.changed AND l.level = l.before
           AND r.account_id = l.acc AND r.reservation_id = l.res AND r.at = l.at)
    INSERT INTO reservation_steps (account_id, reservation_id, at, committed)
    SELECT acc, res, at, level FROM l
     WHERE (changed AND level <> before) OR (NOT changed AND change <> 0)
    ON CONFLICT (account_id, reservation_id, at)
        DO UPDATE SET committed = EXCLUDED.committed;
END $$;

-- The peak of a reservation's committed slots over [s, e): the level at s
-- (the last row at or before it) and of every row inside. A function, so its
-- plan is made once per session.
CREATE FUNCTION reservation_steps_peak(acc text, res text, s bigint, e bigint)
RETURNS bigint LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN GREATEST(
        COALESCE((SELECT r.committed FROM reservation_steps r
                   WHERE r.account_id = acc AND r.reservation_id = res AND r.at <= s
                   ORDER BY r.at DESC LIMIT 1), 0),
        COALESCE((SELECT max(r.committed) FROM reservation_steps r
                   WHERE r.account_id = acc AND r.reservation_id = res
                     AND r.at > s AND r.at < e), 0));
END $$;

-- Inserts and deletes, per statement (a bulk insert is applied at once).
CREATE FUNCTION grants_steps_inserted() RETURNS trigger LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    PERFORM reservation_steps_apply(array_agg(acc), array_agg(res), array_agg(at),
                                    array_agg(delta))
       FROM (SELECT account_id AS acc, reservation_id AS res, starts_at AS at,
                    slots::bigint AS delta
               FROM new_rows WHERE settled_state <> 'cancelled' AND ends_at > starts_at
             UNION ALL
             SELECT account_id, reservation_id, ends_at, -slots::bigint
               FROM new_rows WHERE settled_state <> 'cancelled' AND ends_at > starts_at) c;
    RETURN NULL;
END $$;

CREATE FUNCTION grants_steps_deleted() RETURNS trigger LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    PERFORM reservation_steps_apply(array_agg(acc), array_agg(res), array_agg(at),
                                    array_agg(delta))
       FROM (SELECT account_id AS acc, reservation_id AS res, starts_at AS at,
                    -slots::bigint AS delta
               FROM old_rows WHERE settled_state <> 'cancelled' AND ends_at > starts_at
             UNION ALL
             SELECT account_id, reservation_id, ends_at, slots::bigint
               FROM old_rows WHERE settled_state <> 'cancelled' AND ends_at > starts_at) c;
    RETURN NULL;
END $$;

-- A change of one grant's term, slots or cancellation (settlement writes
-- them one grant at a time): the old commitment out, the new one in.
CREATE FUNCTION grants_steps_updated() RETURNS trigger LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    old_live boolean := OLD.settled_state <> 'cancelled' AND OLD.ends_at > OLD.starts_at;
    new_live boolean := NEW.settled_state <> 'cancelled' AND NEW.ends_at > NEW.starts_at;
BEGIN
    PERFORM reservation_steps_apply(
        ARRAY[OLD.account_id, OLD.account_id, NEW.account_id, NEW.account_id],
        ARRAY[OLD.reservation_id, OLD.reservation_id, NEW.reservation_id, NEW.reservation_id],
        ARRAY[OLD.starts_at, OLD.ends_at, NEW.starts_at, NEW.ends_at],
        ARRAY[CASE WHEN old_live THEN -OLD.slots ELSE 0 END,
              CASE WHEN old_live THEN OLD.slots ELSE 0 END,
              CASE WHEN new_live THEN NEW.slots ELSE 0 END,
              CASE WHEN new_live THEN -NEW.slots ELSE 0 END
             ]::bigint[]);
    RETURN NULL;
END $$;

CREATE TRIGGER grants_steps_inserted AFTER INSERT ON grants
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION grants_steps_inserted();
CREATE TRIGGER grants_steps_deleted AFTER DELETE ON grants
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION grants_steps_deleted();
-- Only a change of what the steps sum (metering's marks and settlement's
-- state changes between scheduled, active and ended leave them alone).
CREATE TRIGGER grants_steps_updated AFTER UPDATE ON grants
    FOR EACH ROW
    WHEN (OLD.account_id IS DISTINCT FROM NEW.account_id
       OR OLD.reservation_id IS DISTINCT FROM NEW.reservation_id
       OR OLD.starts_at IS DISTINCT FROM NEW.starts_at
       OR OLD.ends_at IS DISTINCT FROM NEW.ends_at
       OR OLD.slots IS DISTINCT FROM NEW.slots
       OR (OLD.settled_state = 'cancelled') IS DISTINCT FROM (NEW.settled_state = 'cancelled'))
    EXECUTE FUNCTION grants_steps_updated();

-- The steps of the grants already stored: at each instant where the net
-- change is not zero, the running sum.
INSERT INTO reservation_steps (account_id, reservation_id, at, committed)
SELECT account_id, reservation_id, at,
       sum(delta) OVER (PARTITION BY account_id, reservation_id ORDER BY at)
  FROM (SELECT account_id, reservation_id, at, sum(d) AS delta
          FROM (SELECT account_id, reservation_id, starts_at AS at, slots::bigint AS d
                  FROM grants WHERE settled_state <> 'cancelled' AND ends_at > starts_at
                UNION ALL
                SELECT account_id, reservation_id, ends_at, -slots::bigint
                  FROM grants WHERE settled_state <> 'cancelled' AND ends_at > starts_at) e
         GROUP BY account_id, reservation_id, at) c
 WHERE delta <> 0;
