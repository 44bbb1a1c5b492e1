-- txoutbox schema, version 6: indexes that bound the operators' look-ups and
-- the per-topic figures by what they return.
--
-- Each write adds two entries (the event and topic indexes), a dead row
-- four more. Building them here blocks writes to the table while it is
-- read, once per index; on a large table build them beforehand with
-- CREATE INDEX CONCURRENTLY (the same statements) and these keep them.
--
-- An event's rows by event id: `outbox dead show <event id>`, the console's
-- search. Unpublished and dead rows only, like the aggregate indexes
-- (version 5); a published row is found among the newest rows or by its
-- id. Event ids are UUIDv7, so entries are added at the index's end.
CREATE INDEX IF NOT EXISTS outbox_event_idx ON outbox (event_id) WHERE state IN ('pending', 'claimed');
CREATE INDEX IF NOT EXISTS outbox_dead_event_idx ON outbox (event_id) WHERE state = 'dead';

-- The unpublished rows per topic, oldest first: per-topic backlog and lag
-- (outbox status, the console) read each topic's first entry and a capped
-- count of its entries, topic by topic, not the whole backlog. A claim
-- changes none of its columns, so claims stay heap-only updates.
CREATE INDEX IF NOT EXISTS outbox_topic_idx ON outbox (topic, created_at) WHERE state IN ('pending', 'claimed');

-- Dead letters by topic, by event type and by creation time: a filtered
-- `outbox dead list` page (and retry, drop) reads its page or the filter's
-- index range, not every dead row kept for weeks. Dead rows are few to
-- write. The event type is not limited in length, and a B-tree entry must
-- fit a third of a page: a hash index holds any, so marking an event dead
-- never fails on it (topics are limited by the topic index above).
CREATE INDEX IF NOT EXISTS outbox_dead_topic_idx ON outbox (topic, id) WHERE state = 'dead';
CREATE INDEX IF NOT EXISTS outbox_dead_type_idx ON outbox USING hash (event_type) WHERE state = 'dead';
CREATE INDEX IF NOT EXISTS outbox_dead_created_idx ON outbox (created_at) WHERE state = 'dead';
