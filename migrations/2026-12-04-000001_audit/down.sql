DROP INDEX audit_records_at_idx;
DROP INDEX audit_records_tenant_at_idx;
DROP TABLE audit_records;
