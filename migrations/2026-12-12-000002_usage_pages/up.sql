-- A page of usage records after a cursor, of one tenant (`tenant` set) or of
-- every tenant (NULL): the two shapes usage.list sends when no other filter
-- is given. Its statements are planned once per session, generic, instead of
-- on every page: the log has a partition per month, and planning a page over
-- a year of them cost as much as running it, and more as the months filled
-- (`just scale`, docs/benchmarks.md).
CREATE FUNCTION usage_page(tenant text, after bigint, lim bigint)
RETURNS SETOF usage_records
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF tenant IS NULL THEN
        RETURN QUERY SELECT * FROM usage_records WHERE seq > after ORDER BY seq LIMIT lim;
    ELSE
        RETURN QUERY SELECT * FROM usage_records
                     WHERE tenant_id = tenant AND seq > after ORDER BY seq LIMIT lim;
    END IF;
END
$$;
