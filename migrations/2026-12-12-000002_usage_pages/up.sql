-- A page of one tenant's usage records after a cursor: what usage.list
-- sends for a tenant when no other filter is given. Its statement is planned
-- once per session, generic, instead of on every page: the log has a
-- partition per month, and planning a tenant's page over a year of them cost
-- more than running it, and more as the months filled (`just scale`,
-- docs/benchmarks.md). Root's page of every tenant is not read here: with a
-- generic plan it took ten times as long at a year of data.
CREATE FUNCTION usage_tenant_page(tenant text, after bigint, lim bigint)
RETURNS SETOF usage_records
LANGUAGE plpgsql STABLE STRICT
SET plan_cache_mode = force_generic_plan
-- A page is at most 1,001 rows: never worth parallel workers, whatever a
-- generic plan estimates without the cursor and the page size.
SET max_parallel_workers_per_gather = 0
AS $$
BEGIN
    RETURN QUERY SELECT * FROM usage_records
                 WHERE tenant_id = tenant AND seq > after ORDER BY seq LIMIT lim;
END
$$;
