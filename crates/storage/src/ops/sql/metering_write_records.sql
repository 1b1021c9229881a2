INSERT INTO usage_records (seq, usage_id, tenant_id, project_id, meter, quantity_micro,
unit, period_start, period_end, grant_id, instance_id, subject, target, tags,
recorded_at)
SELECT $1 + s.i, s.usage_id, g.tenant_id, g.project_id, g.meter, s.q, g.unit, s.ps,
       s.pe, g.grant_id, g.instance_id, g.subject, g.target, g.tags, $16
FROM unnest($2::text[], $3::int4[], $4::bigint[], $5::bigint[], $6::bigint[])
     WITH ORDINALITY AS s(usage_id, k, q, ps, pe, i)
JOIN unnest($7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
            $12::text[], $13::text[], $14::text[], $15::jsonb[])
     WITH ORDINALITY AS g(tenant_id, project_id, meter, unit, grant_id, instance_id,
                          subject, target, tags, k) ON g.k = s.k
ORDER BY s.i
