DROP INDEX IF EXISTS outbox_retry_agg_idx;
DROP INDEX IF EXISTS outbox_retry_idx;
DROP INDEX IF EXISTS outbox_fresh_idx;
ALTER TABLE outbox DROP COLUMN IF EXISTS retry_at;
DROP INDEX IF EXISTS outbox_dead_agg_idx;
DROP INDEX IF EXISTS outbox_aggregate_idx;
DROP INDEX IF EXISTS outbox_prune_idx;
