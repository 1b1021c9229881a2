ALTER TABLE vm_orphans DROP COLUMN found_at;
DROP TABLE installation;
