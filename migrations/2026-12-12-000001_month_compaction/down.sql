DROP FUNCTION bc_compact_month(text, bigint, bigint);
DROP FUNCTION bc_compactable_months(text, bigint);
DROP FUNCTION bc_month_closed(bigint, bigint);
DROP FUNCTION bc_month_end(bigint);
DROP TABLE compacted_months;
