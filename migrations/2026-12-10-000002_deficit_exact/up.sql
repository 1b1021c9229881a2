-- The exact credit of a grant (contract 5.4) before the hour its slot meter
-- resumes at, as a rational `numer/denom` in slot-milliseconds: metering
-- resumes from it, so an hour already credited is never recomputed and the
-- history before it is not needed. NULL: not kept yet (credits written
-- before this column), computed once from the history since the grant's
-- start.
ALTER TABLE grants ADD COLUMN deficit_exact text DEFAULT '0';
UPDATE grants SET deficit_exact = NULL WHERE deficit_micro > 0;
