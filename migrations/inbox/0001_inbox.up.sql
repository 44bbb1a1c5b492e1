-- txoutbox consumer inbox, version 1: the events each consumer has processed.
--
-- A consumer inserts (consumer, event_id) in the same transaction as the
-- business change the event causes, with ON CONFLICT DO NOTHING: a row that
-- already exists means the event was processed, so the redelivery is skipped.
-- A concurrent duplicate blocks on the first transaction's uncommitted row
-- and then skips (first committed) or proceeds (first rolled back).
--
-- event_id is a uuid, not text: the relay's ids are UUIDs, and comparing
-- parsed values makes "A0..." and "a0..." the same event, which text would not.
CREATE TABLE inbox (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- Pruning deletes the oldest rows first, in batches, by processed_at.
CREATE INDEX inbox_processed_at_idx ON inbox (processed_at);
