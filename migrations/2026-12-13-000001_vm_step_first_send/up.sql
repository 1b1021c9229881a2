-- When a step was first sent to the provider (real time, epoch ms): its
-- deadline counts from then (contract 3.12 r4), never from its recording, so
-- time queued behind other steps or paused by a rate quota does not count.
ALTER TABLE vm_steps ADD COLUMN sent_wall BIGINT;
