ALTER TABLE provider_accounts DROP COLUMN scan_retry_at;
ALTER TABLE provider_accounts DROP COLUMN scan_failures;
ALTER TABLE instances DROP COLUMN usage_metered_through;
DROP TABLE usage_records;
DROP TABLE usage_head;
