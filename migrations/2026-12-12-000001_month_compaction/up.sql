-- A month of usage records or events is written in time order, so one
-- tenant's rows lie one to a heap page among every other tenant's: a page of
-- 100 of them reads about 100 heap pages, and at a year of data those pages
-- no longer stay in memory. Once a month is closed, nothing writes to it, so
-- the reconciler rewrites it once sorted by (tenant_id, seq): a tenant's page
-- then reads a few heap pages.
--
-- The rewrite is one transaction: a sorted copy is built beside the month
-- while the month is locked against writes (readers go on), then the copy
-- takes the month's place (detach, drop, rename, attach), which holds the
-- parent's exclusive lock only for those catalog changes. A crash at any
-- point leaves the month as it was; a month is rewritten at most once.

-- Months rewritten sorted by tenant, never rewritten again.
CREATE TABLE compacted_months (
    parent       text NOT NULL CHECK (parent IN ('usage_records', 'events')),
    month_start  bigint NOT NULL,
    rows         bigint NOT NULL CHECK (rows >= 0),
    compacted_at bigint NOT NULL DEFAULT (extract(epoch FROM now()) * 1000)::bigint,
    PRIMARY KEY (parent, month_start)
);

-- The end (ms, UTC) of the month starting at `lo`.
CREATE FUNCTION bc_month_end(lo bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT (extract(epoch FROM (to_timestamp(lo / 1000.0) AT TIME ZONE 'UTC')
                               + interval '1 month') * 1000)::bigint
$$;

-- Whether the month starting at `lo` is closed at `now_ms`: ended a day or
-- more before it (the reconciler writes an hour's usage just after it ends; a
-- later write, from a reconciler days behind, is still safe: see
-- bc_compact_month).
CREATE FUNCTION bc_month_closed(lo bigint, now_ms bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT bc_month_end(lo) <= now_ms - 86400000
$$;

-- The months of `parent` that may be rewritten at `now_ms`, oldest first:
-- attached, holding rows, never rewritten, and closed.
CREATE FUNCTION bc_compactable_months(parent text, now_ms bigint)
RETURNS TABLE (month_start bigint) LANGUAGE sql STABLE AS $$
    SELECT m.lo
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    CROSS JOIN LATERAL (
        SELECT (extract(epoch FROM to_timestamp(
                    substring(c.relname FROM '_(\d{4}_\d{2})$'), 'YYYY_MM')
                    AT TIME ZONE 'UTC') * 1000)::bigint AS lo
    ) m
    WHERE i.inhparent = parent::regclass
      AND c.relname ~ ('^' || parent || '_\d{4}_\d{2}$')
      AND bc_month_closed(m.lo, now_ms)
      -- An empty month has nothing to sort (its file is empty).
      AND pg_relation_size(c.oid) > 0
      AND NOT EXISTS (SELECT 1 FROM compacted_months x
                      WHERE x.parent = bc_compactable_months.parent AND x.month_start = m.lo)
    ORDER BY m.lo
$$;

-- Rewrites the month of `parent` holding `ms` sorted by (tenant_id, seq) and
-- records it in compacted_months. Returns the rows copied, or NULL when the
-- month was already rewritten or another worker is rewriting a month.
-- Refuses a month not closed at `now_ms`, or not an attached partition.
--
-- Writers of the month wait while it is copied (the SHARE lock); readers do
-- not. A write that routed its row to the month before the lock is in the
-- copy (the copy starts once it has committed). A write routed to it after
-- holds the parent's lock while it waits for the month's, so this function
-- cannot have the parent's: its tries run out and it rolls back whole (or
-- PostgreSQL's deadlock check fails one of the two, whole), so the row is
-- written once or not at all, never lost from a committed write. A write
-- that comes after the parent's lock is taken routes to the sorted copy.
CREATE FUNCTION bc_compact_month(parent text, ms bigint, now_ms bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    key text := bc_month_partition_key(parent);
    lo bigint := bc_month_start(ms);
    hi bigint := bc_month_end(lo);
    part text := parent || '_' || to_char(to_timestamp(lo / 1000.0) AT TIME ZONE 'UTC', 'YYYY_MM');
    sorted text := part || '_sorted';
    cols text;
    n bigint;
    ix record;
    got boolean := false;
    waited text := current_setting('lock_timeout');
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION '% is not partitioned by month', parent;
    END IF;
    IF NOT bc_month_closed(lo, now_ms) THEN
        RAISE EXCEPTION 'the month starting % is too recent to compact (it ended less than a '
                        'day ago)', to_timestamp(lo / 1000.0) AT TIME ZONE 'UTC';
    END IF;
    -- One rewrite at a time; another worker's is not waited for.
    IF NOT pg_try_advisory_xact_lock(hashtext('bc_compact_month')) THEN
        RETURN NULL;
    END IF;
    IF EXISTS (SELECT 1 FROM compacted_months c
               WHERE c.parent = bc_compact_month.parent AND c.month_start = lo) THEN
        RETURN NULL;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                   WHERE i.inhparent = parent::regclass AND c.relname = part) THEN
        RAISE EXCEPTION 'no attached partition % to compact', part;
    END IF;
    EXECUTE format('LOCK TABLE %I IN SHARE MODE', part);
    SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) INTO cols
    FROM pg_attribute
    WHERE attrelid = parent::regclass AND attnum > 0 AND NOT attisdropped;
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING ALL)', sorted, parent);
    -- Proves the partition bound, so attaching the copy scans nothing.
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%I >= %s AND %I < %s)',
                   sorted, sorted || '_bound', key, lo, key, hi);
    EXECUTE format('INSERT INTO %I (%s) SELECT %s FROM %I ORDER BY tenant_id, seq',
                   sorted, cols, cols, part);
    GET DIAGNOSTICS n = ROW_COUNT;
    EXECUTE format('ANALYZE %I', sorted);
    -- The log's exclusive lock, for the swap's catalog changes only. While
    -- it is waited for, every reader and writer of the log queues behind it,
    -- so each try waits at most 50 ms, up to 40 tries a quarter second
    -- apart; then the whole rewrite rolls back and a later pass tries again.
    FOR attempt IN 1..40 LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '50ms', true);
            -- ONLY: the parent alone (every reader and writer of the log
            -- takes it first). Without it the lock recurses to every month,
            -- and autovacuum on any of them holds it off.
            EXECUTE format('LOCK TABLE ONLY %I IN ACCESS EXCLUSIVE MODE', parent);
            got := true;
            EXIT;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM pg_sleep(0.25);
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', waited, true);
    IF NOT got THEN
        RAISE EXCEPTION USING ERRCODE = 'lock_not_available',
            MESSAGE = format('lock timeout: %s stayed in use for 40 tries of 50 ms', parent);
    END IF;
    EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', parent, part);
    EXECUTE format('DROP TABLE %I', part);
    EXECUTE format('ALTER TABLE %I RENAME TO %I', sorted, part);
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)',
                   parent, part, lo, hi);
    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', part, sorted || '_bound');
    -- The copy's indexes take the names the month's had.
    FOR ix IN SELECT c.relname::text AS name
              FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
              WHERE i.indrelid = part::regclass AND starts_with(c.relname, sorted) LOOP
        IF NOT bc_table_exists(replace(ix.name, sorted, part)) THEN
            EXECUTE format('ALTER INDEX %I RENAME TO %I', ix.name, replace(ix.name, sorted, part));
        END IF;
    END LOOP;
    INSERT INTO compacted_months (parent, month_start, rows) VALUES (parent, lo, n);
    RETURN n;
END
$$;
