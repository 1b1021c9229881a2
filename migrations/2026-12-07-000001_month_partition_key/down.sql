-- The two partition functions as 2026-12-06-000001_monthly_partitions made
-- them, each with its own CASE, then without the shared key function.
CREATE OR REPLACE FUNCTION bc_ensure_month_partitions(parent text, from_ms bigint, to_ms bigint)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    key text := CASE parent WHEN 'usage_records' THEN 'period_start'
                            WHEN 'events' THEN 'occurred_at' END;
    m timestamp := date_trunc('month', to_timestamp(from_ms / 1000.0) AT TIME ZONE 'UTC');
    last_month timestamp := date_trunc('month', to_timestamp(to_ms / 1000.0) AT TIME ZONE 'UTC');
    lo bigint;
    hi bigint;
    part text;
    locked boolean := false;
    created integer := 0;
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION '% is not partitioned by month', parent;
    END IF;
    IF last_month - m > interval '10 years' THEN
        RAISE EXCEPTION 'refusing to create more than ten years of partitions of %', parent;
    END IF;
    WHILE m <= last_month LOOP
        part := parent || '_' || to_char(m, 'YYYY_MM');
        lo := (extract(epoch FROM m) * 1000)::bigint;
        hi := (extract(epoch FROM m + interval '1 month') * 1000)::bigint;
        IF NOT bc_table_exists(part)
           AND NOT EXISTS (SELECT 1 FROM archived_months a
                           WHERE a.parent = bc_ensure_month_partitions.parent
                             AND a.month_start = lo) THEN
            IF NOT locked THEN
                PERFORM pg_advisory_xact_lock(hashtext('bc_ensure_month_partitions'));
                -- Writers wait while the month is made, and the month waits
                -- for writers in flight: an insert that routed its row by the
                -- partitions as they were must not meet the default
                -- partition's new constraint ("violates partition
                -- constraint"). Readers are not blocked.
                EXECUTE format('LOCK TABLE %I IN SHARE ROW EXCLUSIVE MODE', parent);
                locked := true;
            END IF;
            -- Checked again under the lock: another caller may have made it.
            IF NOT bc_table_exists(part) THEN
                EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                               part, parent);
                EXECUTE format('WITH moved AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2 '
                               'RETURNING *) INSERT INTO %I SELECT * FROM moved',
                               parent || '_default', key, key, part)
                    USING lo, hi;
                EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                               parent, part, lo, hi);
                created := created + 1;
            END IF;
        END IF;
        m := m + interval '1 month';
    END LOOP;
    RETURN created;
END
$$;

CREATE OR REPLACE FUNCTION bc_detach_month(parent text, ms bigint, now_ms bigint) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    lo bigint := bc_month_start(ms);
    part text := parent || '_' || to_char(to_timestamp(lo / 1000.0) AT TIME ZONE 'UTC', 'YYYY_MM');
    hi bigint := (extract(epoch FROM (to_timestamp(lo / 1000.0) AT TIME ZONE 'UTC')
                  + interval '1 month') * 1000)::bigint;
    key text := CASE parent WHEN 'usage_records' THEN 'period_start'
                            WHEN 'events' THEN 'occurred_at' END;
    stray bigint;
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION '% is not partitioned by month', parent;
    END IF;
    IF hi > bc_month_start(bc_month_start(now_ms) - 1) THEN
        RAISE EXCEPTION 'the month starting % is too recent to archive (the reconciler may '
                        'still write it)', to_timestamp(lo / 1000.0) AT TIME ZONE 'UTC';
    END IF;
    IF NOT bc_table_exists(part) THEN
        RAISE EXCEPTION 'no partition % to detach', part;
    END IF;
    EXECUTE format('SELECT count(*) FROM %I WHERE %I >= $1 AND %I < $2',
                   parent || '_default', key, key)
        INTO stray USING lo, hi;
    IF stray > 0 THEN
        RAISE EXCEPTION '% rows of that month are in %_default; run bc_ensure_month_partitions '
                        'first', stray, parent;
    END IF;
    EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', parent, part);
    INSERT INTO archived_months (parent, month_start, month_end, table_name)
    VALUES (parent, lo, hi, part);
    RETURN part;
END
$$;

DROP FUNCTION bc_month_partition_key(text);
