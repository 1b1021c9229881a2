DROP TRIGGER IF EXISTS grants_steps_updated ON grants;
DROP TRIGGER IF EXISTS grants_steps_deleted ON grants;
DROP TRIGGER IF EXISTS grants_steps_inserted ON grants;
DROP FUNCTION IF EXISTS grants_steps_updated();
DROP FUNCTION IF EXISTS grants_steps_deleted();
DROP FUNCTION IF EXISTS grants_steps_inserted();
DROP FUNCTION IF EXISTS reservation_steps_peak(text, text, bigint, bigint);
DROP FUNCTION IF EXISTS reservation_steps_apply(text[], text[], bigint[], bigint[]);
DROP TABLE IF EXISTS reservation_steps;
