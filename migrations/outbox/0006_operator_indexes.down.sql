DROP INDEX IF EXISTS outbox_dead_created_idx;
DROP INDEX IF EXISTS outbox_dead_type_idx;
DROP INDEX IF EXISTS outbox_dead_topic_idx;
DROP INDEX IF EXISTS outbox_topic_idx;
DROP INDEX IF EXISTS outbox_dead_event_idx;
DROP INDEX IF EXISTS outbox_event_idx;
