-- Grant notices (contract 9, r2): what the vps.grants pass has sent, so each
-- notice goes out once however many worker replicas run. A notice's row and
-- its events commit in one transaction; a second replica's insert of the
-- same key waits for it and then does nothing.

-- reservation-grant.expiring: one row per grant and configured notice,
-- keyed by the notice's duration (so renaming "7d" to "168h" sends nothing
-- twice).
CREATE TABLE grant_expiry_notices (
    grant_id  text NOT NULL REFERENCES grants (grant_id),
    before_ms bigint NOT NULL CHECK (before_ms > 0),
    notice    text NOT NULL,
    sent_at   bigint NOT NULL,
    PRIMARY KEY (grant_id, before_ms)
);

-- reservation-grant.underused: per grant, the end of the last 24-hour window
-- judged (each window is judged once) and of the last one reported (at most
-- one report per 24 hours).
CREATE TABLE grant_underuse_checks (
    grant_id    text PRIMARY KEY REFERENCES grants (grant_id),
    checked_to  bigint NOT NULL,
    reported_to bigint
);

-- The pass looks for open grants near their end, and for open grants active
-- for a day.
CREATE INDEX grants_open_ends_idx ON grants (ends_at)
    WHERE settled_state IN ('scheduled', 'active');
CREATE INDEX grants_open_starts_idx ON grants (starts_at)
    WHERE settled_state IN ('scheduled', 'active');
