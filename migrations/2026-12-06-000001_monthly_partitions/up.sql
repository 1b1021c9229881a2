-- Usage records and events grow forever (a platform with 100,000 grants
-- writes about 876 million slot-hour records a year): both are partitioned by
-- UTC month, usage records by the hour they bill (period_start), events by
-- when they occurred, so an old month can be detached and archived whole.
--
-- Each unique key includes the partition key. The dedupe key of a record
-- (meter, subject, target, period_start) already does; seq stays unique by
-- construction (one head row hands out every number once) and usage_id and
-- event_id are random, so their per-month uniqueness is all PostgreSQL can
-- check and all that is needed.
--
-- A DEFAULT partition takes any row whose month has no partition yet (a
-- manual clock far from the wall clock, a worker that has not yet run), so a
-- write never fails for want of a partition; bc_ensure_month_partitions moves
-- such rows into their month when it creates it. The reconciler creates the
-- current and the next two months on every usage pass.

-- Months already archived (detached by bc_detach_month): the API refuses a
-- usage range reaching into them rather than answer it partly.
CREATE TABLE archived_months (
    parent      text NOT NULL CHECK (parent IN ('usage_records', 'events')),
    month_start bigint NOT NULL,
    month_end   bigint NOT NULL CHECK (month_end > month_start),
    table_name  text NOT NULL,
    detached_at bigint NOT NULL DEFAULT (extract(epoch FROM now()) * 1000)::bigint,
    PRIMARY KEY (parent, month_start)
);

-- The start (ms, UTC) of the month holding instant `ms`.
CREATE FUNCTION bc_month_start(ms bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT (extract(epoch FROM date_trunc('month', to_timestamp(ms / 1000.0) AT TIME ZONE 'UTC'))
            * 1000)::bigint
$$;

-- Whether table `name` exists in the current schema, read from pg_class
-- under the statement's snapshot (to_regclass's cache may not yet have seen a
-- table another transaction just committed).
CREATE FUNCTION bc_table_exists(name text) RETURNS boolean
LANGUAGE sql STABLE STRICT AS $$
    SELECT EXISTS (SELECT 1 FROM pg_class
                   WHERE relname = name AND relnamespace = current_schema()::regnamespace)
$$;

-- Creates the monthly partitions of `parent` for every month from the one
-- holding `from_ms` to the one holding `to_ms`, moving any of their rows out
-- of the default partition. Months already there, or archived, are left
-- alone. Concurrent callers take turns on a transaction-level advisory lock
-- (no session state, so it works through PgBouncer's transaction pooling).
-- Returns the number of partitions created.
CREATE FUNCTION bc_ensure_month_partitions(parent text, from_ms bigint, to_ms bigint)
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

-- Detaches the month holding `ms` from `parent` (its table stays, to be
-- dumped and dropped) and records it as archived. Refuses the current month
-- and the one before it, which the reconciler may still write. Returns the
-- detached table's name.
CREATE FUNCTION bc_detach_month(parent text, ms bigint, now_ms bigint) RETURNS text
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

-- usage_records, partitioned.
ALTER TABLE usage_records RENAME TO usage_records_unpartitioned;
ALTER INDEX usage_records_pkey RENAME TO usage_records_unpartitioned_pkey;
ALTER INDEX usage_records_usage_id_key RENAME TO usage_records_unpartitioned_usage_id_key;
ALTER INDEX usage_records_meter_subject_target_period_start_key
    RENAME TO usage_records_unpartitioned_dedupe_key;
ALTER INDEX usage_records_tenant_idx RENAME TO usage_records_unpartitioned_tenant_idx;

CREATE TABLE usage_records (
    seq            bigint NOT NULL,
    usage_id       text NOT NULL,
    tenant_id      text NOT NULL,
    project_id     text,
    meter          text NOT NULL,
    quantity_micro bigint NOT NULL CHECK (quantity_micro >= 0),
    unit           text NOT NULL CHECK (unit IN ('slot-hours', 'instance-hours')),
    period_start   bigint NOT NULL,
    period_end     bigint NOT NULL,
    grant_id       text,
    instance_id    text,
    -- What the record is about (a grant or an instance) and where it ran (a
    -- grant, a reservation, or on-demand): one record per meter, subject,
    -- target and hour, never two.
    subject        text NOT NULL,
    target         text NOT NULL,
    tags           jsonb NOT NULL,
    recorded_at    bigint NOT NULL,
    PRIMARY KEY (seq, period_start),
    UNIQUE (usage_id, period_start),
    UNIQUE (meter, subject, target, period_start)
) PARTITION BY RANGE (period_start);
CREATE INDEX usage_records_tenant_idx ON usage_records (tenant_id, seq);
CREATE TABLE usage_records_default PARTITION OF usage_records DEFAULT;

-- events, partitioned.
ALTER TABLE events RENAME TO events_unpartitioned;
ALTER INDEX events_pkey RENAME TO events_unpartitioned_pkey;
ALTER INDEX events_event_id_key RENAME TO events_unpartitioned_event_id_key;
ALTER INDEX events_grant_idx RENAME TO events_unpartitioned_grant_idx;
ALTER INDEX events_capacity_idx RENAME TO events_unpartitioned_capacity_idx;

CREATE TABLE events (
    tenant_id   text NOT NULL,
    seq         bigint NOT NULL,
    event_id    text NOT NULL,
    event_type  text NOT NULL,
    data        jsonb NOT NULL,
    occurred_at bigint NOT NULL,
    PRIMARY KEY (tenant_id, seq, occurred_at),
    UNIQUE (event_id, occurred_at)
) PARTITION BY RANGE (occurred_at);
-- reservations.timeline reads the grant events of a reservation's grants
-- and the capacity changes of the reservation.
CREATE INDEX events_grant_idx ON events ((data->>'grantId'), occurred_at)
    WHERE event_type LIKE 'reservation-grant.%';
CREATE INDEX events_capacity_idx ON events ((data->>'reservationId'), occurred_at)
    WHERE event_type = 'reservation-grant.capacity-short';
CREATE TABLE events_default PARTITION OF events DEFAULT;

-- The months of the existing rows, to two months past the later of now and
-- the newest row, then the rows themselves.
SELECT bc_ensure_month_partitions('usage_records',
    coalesce((SELECT min(period_start) FROM usage_records_unpartitioned),
             (extract(epoch FROM now()) * 1000)::bigint),
    greatest(coalesce((SELECT max(period_start) FROM usage_records_unpartitioned), 0),
             (extract(epoch FROM now()) * 1000)::bigint) + 62 * 86400000::bigint);
SELECT bc_ensure_month_partitions('events',
    coalesce((SELECT min(occurred_at) FROM events_unpartitioned),
             (extract(epoch FROM now()) * 1000)::bigint),
    greatest(coalesce((SELECT max(occurred_at) FROM events_unpartitioned), 0),
             (extract(epoch FROM now()) * 1000)::bigint) + 62 * 86400000::bigint);
INSERT INTO usage_records SELECT * FROM usage_records_unpartitioned;
INSERT INTO events SELECT * FROM events_unpartitioned;
DROP TABLE usage_records_unpartitioned;
DROP TABLE events_unpartitioned;
