ALTER TABLE vm_steps DROP COLUMN sent_wall;
