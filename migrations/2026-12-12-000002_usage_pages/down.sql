DROP FUNCTION usage_tenant_page(text, bigint, bigint);
