DROP INDEX IF EXISTS outbox_aggregate_idx;
DROP INDEX IF EXISTS outbox_prune_idx;
