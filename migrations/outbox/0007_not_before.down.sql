DROP TRIGGER IF EXISTS outbox_not_before ON outbox;
DROP FUNCTION IF EXISTS outbox_not_before();
CREATE INDEX IF NOT EXISTS outbox_lag_idx ON outbox (created_at) WHERE state IN ('pending', 'claimed');
CREATE INDEX IF NOT EXISTS outbox_topic_idx ON outbox (topic, created_at) WHERE state IN ('pending', 'claimed');
DROP INDEX IF EXISTS outbox_topic_due_idx;
DROP INDEX IF EXISTS outbox_scheduled_idx;
DROP INDEX IF EXISTS outbox_due_idx;
ALTER TABLE outbox DROP COLUMN IF EXISTS not_before;
