DROP INDEX IF EXISTS grants_open_started_idx;
DROP INDEX IF EXISTS grants_committed_term_idx;
