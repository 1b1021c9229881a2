-- Managed instances (contract 3.12): pools with a `vm`, instances that are
-- VMs at the provider, the steps that drive them and the listings that
-- watch them.

ALTER TABLE pools ADD COLUMN vm jsonb;

ALTER TABLE instances DROP CONSTRAINT instances_state_check;
ALTER TABLE instances ADD CONSTRAINT instances_state_check CHECK (state IN (
    'running', 'stopped', 'deleted',
    'provisioning', 'stopping', 'starting', 'deleting', 'failed'));
-- Whether it holds a running slot (contract 4, r3): a ledger instance when
-- running; a managed one from its admission or start request until the
-- provider confirms its VM stopped or gone.
ALTER TABLE instances ADD COLUMN powered boolean;
UPDATE instances SET powered = (state = 'running');
ALTER TABLE instances ALTER COLUMN powered SET NOT NULL;
-- A row written without it (a bulk load of history) holds nothing.
ALTER TABLE instances ALTER COLUMN powered SET DEFAULT false;
ALTER TABLE instances ADD COLUMN managed boolean NOT NULL DEFAULT false;
ALTER TABLE instances ADD COLUMN vm_name text;
ALTER TABLE instances ADD COLUMN vm_zone text;
-- The reservation its VM consumes (fixed at creation: a VM never moves).
ALTER TABLE instances ADD COLUMN vm_account_id text;
ALTER TABLE instances ADD COLUMN vm_reservation_id text;
ALTER TABLE instances ADD COLUMN vm_status text;
ALTER TABLE instances ADD COLUMN vm_observed_at bigint;
-- The database's real time (epoch ms) of the last change a step or an
-- admission made: a listing begun before it says nothing about it.
ALTER TABLE instances ADD COLUMN vm_changed_wall bigint;
-- The listing that first missed its VM (its sequence and instant).
ALTER TABLE instances ADD COLUMN vm_missing_seq bigint;
ALTER TABLE instances ADD COLUMN vm_missing_at bigint;
ALTER TABLE instances ADD COLUMN failure_code text;
ALTER TABLE instances ADD COLUMN deleted_reason text
    CHECK (deleted_reason IN ('requested', 'lost', 'tenant-deleted'));
ALTER TABLE instances ADD CONSTRAINT instances_managed_vm
    CHECK (NOT managed OR (vm_name IS NOT NULL AND vm_zone IS NOT NULL));
CREATE INDEX instances_managed_live_idx ON instances (pool_id)
    WHERE managed AND state NOT IN ('deleted', 'failed');

-- A segment billed only while its VM was seen running: a managed instance
-- provisioning, starting, stopping or deleting holds its slot unbilled.
ALTER TABLE placement_segments ADD COLUMN billed boolean NOT NULL DEFAULT true;

-- The steps of managed instances: an outbox written in the transaction of
-- the change it carries out, driven by the worker. At most one step of an
-- instance is worked on at a time: the oldest open one.
CREATE TABLE vm_steps (
    step_id      bigserial PRIMARY KEY,
    instance_id  text NOT NULL REFERENCES instances (instance_id),
    kind         text NOT NULL CHECK (kind IN ('create', 'stop', 'start', 'delete')),
    -- Sent with every try of the step (Google's requestId, a UUID).
    request_id   text NOT NULL UNIQUE,
    state        text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'done', 'failed')),
    zone         text NOT NULL,
    -- For an on-demand create: the index in the pool's zones tried now.
    zone_index   integer NOT NULL DEFAULT 0,
    -- The provider's operation, once it answered.
    operation    text,
    attempts     integer NOT NULL DEFAULT 0,
    -- The product's clock at the request.
    requested_at bigint NOT NULL,
    -- Real time (epoch ms, the database's): recorded, give up, next try.
    created_wall bigint NOT NULL,
    deadline_wall bigint NOT NULL,
    due_wall     bigint NOT NULL,
    -- The claim of the replica working on it.
    lease_until  bigint,
    lease_token  text,
    finished_wall bigint,
    failure_code text
);
CREATE INDEX vm_steps_due_idx ON vm_steps (due_wall, step_id) WHERE state = 'open';
CREATE INDEX vm_steps_instance_idx ON vm_steps (instance_id, step_id);

-- The drift listings of an account's managed VMs: one replica at a time,
-- at most once per interval.
CREATE TABLE vm_listings (
    account_id   text PRIMARY KEY REFERENCES provider_accounts (account_id) ON DELETE CASCADE,
    listing_seq  bigint NOT NULL DEFAULT 0,
    lease_until  bigint,
    last_wall    bigint,
    failures     integer NOT NULL DEFAULT 0
);

-- Labelled VMs without a live instance, as the listings saw them.
CREATE TABLE vm_orphans (
    account_id   text NOT NULL REFERENCES provider_accounts (account_id) ON DELETE CASCADE,
    zone         text NOT NULL,
    vm_name      text NOT NULL,
    instance_id  text,
    first_seq    bigint NOT NULL,
    last_seq     bigint NOT NULL,
    request_id   text NOT NULL,
    deleted_at   bigint,
    PRIMARY KEY (account_id, zone, vm_name)
);
