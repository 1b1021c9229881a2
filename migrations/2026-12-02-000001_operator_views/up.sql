-- Operator views (contract 3.10): the indexes their reads range over.

-- reservationGrants.list and instances.list page newest first by keyset
-- ((created_at, id) below the cursor); each filter has an index in that order.
CREATE INDEX grants_reservation_newest_idx ON grants (reservation_id, created_at DESC, grant_id DESC);
CREATE INDEX grants_account_newest_idx ON grants (account_id, created_at DESC, grant_id DESC);
CREATE INDEX instances_all_idx ON instances (created_at DESC, instance_id DESC);
CREATE INDEX instances_pool_idx ON instances (pool_id, created_at DESC, instance_id DESC);
CREATE INDEX instances_reservation_newest_idx ON instances (reservation_id, created_at DESC, instance_id DESC)
    WHERE reservation_id IS NOT NULL;
CREATE INDEX instances_grant_idx ON instances (grant_id, created_at DESC, instance_id DESC)
    WHERE grant_id IS NOT NULL;

-- reservations.timeline and reservationGrants.usage read a reservation's
-- placement segments over a range.
CREATE INDEX placement_segments_reservation_idx ON placement_segments (account_id, reservation_id, from_ms)
    WHERE reservation_id IS NOT NULL;

-- reservations.timeline reads the grant events of a reservation's grants
-- and the capacity changes of the reservation.
CREATE INDEX events_grant_idx ON events ((data->>'grantId'), occurred_at)
    WHERE event_type LIKE 'reservation-grant.%';
CREATE INDEX events_capacity_idx ON events ((data->>'reservationId'), occurred_at)
    WHERE event_type = 'reservation-grant.capacity-short';
