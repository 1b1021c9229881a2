-- Back to one table each, with every attached partition's rows (archived
-- months stay wherever they were archived).
CREATE TABLE usage_records_keep AS SELECT * FROM usage_records;
DROP TABLE usage_records;
CREATE TABLE usage_records (
    seq            bigint PRIMARY KEY,
    usage_id       text NOT NULL UNIQUE,
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
    UNIQUE (meter, subject, target, period_start)
);
CREATE INDEX usage_records_tenant_idx ON usage_records (tenant_id, seq);
INSERT INTO usage_records SELECT * FROM usage_records_keep;
DROP TABLE usage_records_keep;

CREATE TABLE events_keep AS SELECT * FROM events;
DROP TABLE events;
CREATE TABLE events (
    tenant_id   text NOT NULL,
    seq         bigint NOT NULL,
    event_id    text NOT NULL UNIQUE,
    event_type  text NOT NULL,
    data        jsonb NOT NULL,
    occurred_at bigint NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);
CREATE INDEX events_grant_idx ON events ((data->>'grantId'), occurred_at)
    WHERE event_type LIKE 'reservation-grant.%';
CREATE INDEX events_capacity_idx ON events ((data->>'reservationId'), occurred_at)
    WHERE event_type = 'reservation-grant.capacity-short';
INSERT INTO events SELECT * FROM events_keep;
DROP TABLE events_keep;

DROP FUNCTION bc_detach_month(text, bigint, bigint);
DROP FUNCTION bc_ensure_month_partitions(text, bigint, bigint);
DROP FUNCTION bc_month_start(bigint);
DROP FUNCTION bc_table_exists(text);
DROP TABLE archived_months;
