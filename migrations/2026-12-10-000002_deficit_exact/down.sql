ALTER TABLE grants DROP COLUMN deficit_exact;
