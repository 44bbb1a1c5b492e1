ALTER TABLE outbox_relays DROP COLUMN name;
