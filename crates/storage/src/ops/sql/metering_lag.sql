SELECT
(SELECT min(metered_through) FROM grants
  WHERE settled_state <> 'cancelled' AND metered_through < ends_at
    AND metered_through < $1) AS grants,
(SELECT min(usage_metered_through) FROM instances
  WHERE usage_metered_through < $1
    AND (state <> 'deleted' OR usage_metered_through < deleted_at)) AS usage
