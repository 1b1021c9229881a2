-- This installation of the platform (contract 3.12 r4, "Only its own VMs"):
-- one row, made here once. Its id labels every VM the platform makes
-- (`bc-installation`), and listings, orphan deletion and adoption consider
-- only the VMs that carry it, so two installations sharing a project never
-- touch each other's VMs. A database restored from a backup keeps it.
-- The id is a GCE label value: 32 lowercase hexadecimal digits.
CREATE TABLE installation (
    id          text PRIMARY KEY CHECK (id ~ '^[a-z0-9_-]{1,63}$'),
    created_at  bigint NOT NULL
);
-- At most one row.
CREATE UNIQUE INDEX installation_one_row ON installation ((true));
INSERT INTO installation (id, created_at)
VALUES (replace(gen_random_uuid()::text, '-', ''),
        (extract(epoch FROM clock_timestamp()) * 1000)::bigint);

-- An orphan whose `bc-instance` id is newer than every instance id this
-- database has made (a VM made after the backup it was restored from): when
-- it was found. Such an orphan is never deleted; `instance.orphan-found` is
-- published once, when this is set.
ALTER TABLE vm_orphans ADD COLUMN found_at bigint;
