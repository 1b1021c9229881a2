WITH head AS (
  INSERT INTO event_heads (tenant_id, last_seq) VALUES ($1, $2)
  ON CONFLICT (tenant_id)
  DO UPDATE SET last_seq = event_heads.last_seq + EXCLUDED.last_seq
  RETURNING last_seq)
INSERT INTO events (tenant_id, seq, event_id, event_type, data, occurred_at)
SELECT $1, head.last_seq - $2 + e.ord, e.event_id, e.event_type, e.data, e.at
FROM head, unnest($3, $4, $5, $6)
  WITH ORDINALITY AS e (event_id, event_type, data, at, ord)
