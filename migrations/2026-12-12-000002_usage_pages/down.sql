DROP FUNCTION usage_page(text, bigint, bigint);
