ALTER TABLE api_keys ADD CONSTRAINT api_keys_account_id_fkey FOREIGN KEY (account_id) REFERENCES provider_accounts (account_id);
DROP TABLE grants;
DROP TABLE reservations;
