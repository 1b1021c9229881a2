ALTER TABLE grants DROP COLUMN deficit_micro;
DROP TABLE reservation_totals;
