-- The reads a grant create does under its reservation's row lock depend on
-- the grants that overlap the new term, not on the reservation's history.
--
-- The capacity check reads the non-cancelled grants whose term overlaps the
-- new one: a GiST index over the term as a range, with the reservation's key
-- (btree_gist gives text its GiST operator class; it is a trusted extension,
-- so a database owner may create it on managed PostgreSQL too).
CREATE EXTENSION IF NOT EXISTS btree_gist;
CREATE INDEX grants_committed_term_idx ON grants
    USING gist (account_id, reservation_id, int8range(starts_at, ends_at))
    WHERE settled_state <> 'cancelled';

-- Settlement reads the open grants that have started (nothing is due for a
-- grant starting later): the future and the ended ones stay out of it.
CREATE INDEX grants_open_started_idx ON grants (account_id, reservation_id, starts_at)
    WHERE settled_state IN ('scheduled', 'active');
