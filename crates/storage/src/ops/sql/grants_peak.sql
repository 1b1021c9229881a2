-- The peak of a reservation's committed step function over [$3, $4)
-- (migration reservation_steps).
SELECT reservation_steps_peak($1, $2, $3, $4) AS peak
