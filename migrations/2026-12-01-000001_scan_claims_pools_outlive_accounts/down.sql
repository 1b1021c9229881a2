ALTER TABLE provider_accounts DROP COLUMN scan_claimed_at;
ALTER TABLE provider_accounts DROP COLUMN scan_lease_until;
ALTER TABLE provider_accounts DROP COLUMN scan_applied_seq;
ALTER TABLE provider_accounts DROP COLUMN scan_seq;

-- Pools whose account was deleted keep their account_id; the constraint is
-- restored for new rows without checking those.
ALTER TABLE pools ADD CONSTRAINT pools_account_id_fkey
    FOREIGN KEY (account_id) REFERENCES provider_accounts (account_id) NOT VALID;
