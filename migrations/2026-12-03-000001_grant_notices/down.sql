DROP INDEX grants_open_starts_idx;
DROP INDEX grants_open_ends_idx;
DROP TABLE grant_underuse_checks;
DROP TABLE grant_expiry_notices;
