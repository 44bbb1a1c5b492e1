ALTER TABLE outbox_relays DROP COLUMN name;
DROP INDEX outbox_aggregate_idx;
