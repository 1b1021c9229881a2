-- A pool outlives the provider account it was built on: its account_id stays
-- as a record of where it came from (contract 3.5, r2).
ALTER TABLE pools DROP CONSTRAINT pools_account_id_fkey;

-- Scans are claimed per account (contract 6, r2). Each claim takes the next
-- ticket (scan_seq); an answer is applied only if its ticket is newer than
-- the last one applied (scan_applied_seq), so a scan started earlier never
-- overwrites one started later. The lease (scan_lease_until) and the claim
-- instant (scan_claimed_at) are in the database's real time, in epoch
-- milliseconds: they keep replicas from listing an account at once, or more
-- than once per interval.
ALTER TABLE provider_accounts ADD COLUMN scan_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE provider_accounts ADD COLUMN scan_applied_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE provider_accounts ADD COLUMN scan_lease_until bigint;
ALTER TABLE provider_accounts ADD COLUMN scan_claimed_at bigint;
