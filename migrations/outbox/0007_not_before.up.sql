-- txoutbox schema, version 7: events delivered not before a time
-- (txoutbox.Event.NotBefore).
--
-- not_before is the time the application asked for, NULL for at once. The
-- writer also sets retry_at to it when it is in the future (by the
-- database clock), so the claim reads such a row as it reads a retry in
-- backoff (see outboxsql.Claim): not at all until it is due, and its
-- aggregate's later rows are held back behind it. next_attempt_at is set
-- to it too, for relays of earlier versions. A row with a future
-- not_before and no failed attempt is "scheduled": counted apart from the
-- backlog, and not lag. Adding a NULL column rewrites nothing.
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS not_before timestamptz;

-- Lag is measured from when an unpublished row became due: its creation,
-- or its not_before if later. This index replaces version 4's lag index
-- (one entry per unpublished row, as before; claims change none of its
-- columns, so they stay heap-only updates), so the lag stays one entry
-- away however many rows are scheduled for later. Building it blocks
-- writes while the table is read; on a large table build it beforehand
-- with CREATE INDEX CONCURRENTLY and this statement keeps it.
CREATE INDEX IF NOT EXISTS outbox_due_idx ON outbox ((greatest(created_at, not_before))) WHERE state IN ('pending', 'claimed');
DROP INDEX IF EXISTS outbox_lag_idx;

-- The unpublished rows per topic by the time they are due (version 6's
-- topic index, on created_at, replaced): per-topic backlog, lag and
-- scheduled counts (outbox status, the console) read each topic's first
-- entries, the due rows ahead of the scheduled ones, so neither hides the
-- other behind a capped count.
CREATE INDEX IF NOT EXISTS outbox_topic_due_idx ON outbox (topic, (greatest(created_at, not_before))) WHERE state IN ('pending', 'claimed');
DROP INDEX IF EXISTS outbox_topic_idx;

-- The scheduled rows, by their time, for the scheduled count: it reads
-- the rows still to come and nothing of the backlog. Only rows written
-- with a not_before have an entry.
CREATE INDEX IF NOT EXISTS outbox_scheduled_idx ON outbox (not_before) WHERE state IN ('pending', 'claimed') AND not_before IS NOT NULL;

-- The WAL relay (relay/walrelay) publishes every row at commit, so it
-- cannot honour a not_before: a row written with one while a WAL relay's
-- slot streams the table is refused, here where the data is, whatever
-- wrote it. The slot is recognised as outboxadmin recognises it (named as a
-- publication of the table, or in the marker the WAL relay keeps in that
-- publication's comment). The trigger fires only for rows with a
-- not_before, so other inserts pay a null test; the look-up runs once per
-- transaction, which then remembers the answer: a slot created later
-- waits for the transaction to end, and its rows are then part of the
-- backlog the WAL relay publishes when it sets the slot up (which it
-- refuses to do while scheduled rows wait).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_not_before() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    slot text;
BEGIN
    IF current_setting('txoutbox.unstreamed_' || TG_RELID::text, true) IS DISTINCT FROM 'yes' THEN
        SELECT s.slot_name INTO slot
        FROM pg_replication_slots s
        WHERE s.slot_type = 'logical' AND s.plugin = 'pgoutput' AND s.database = current_database()
          AND EXISTS (SELECT 1 FROM pg_publication p, LATERAL pg_get_publication_tables(p.pubname::text) t
                      WHERE t.relid = TG_RELID AND (p.pubname = s.slot_name
                        OR substring(obj_description(p.oid, 'pg_publication') FROM '^txoutbox: (?:initialising )?slot (\S+)') = s.slot_name))
        LIMIT 1;
        IF slot IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'TXO01',
                MESSAGE = format('%s is streamed by the WAL relay''s slot %s, which publishes every event at commit: an event with a future NotBefore would go out early',
                                 TG_RELID::regclass, slot),
                HINT = 'Delayed events need the polling relay (outbox wal takeover hands the table back to it).';
        END IF;
        PERFORM set_config('txoutbox.unstreamed_' || TG_RELID::text, 'yes', true);
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE OR REPLACE TRIGGER outbox_not_before BEFORE INSERT ON outbox
    FOR EACH ROW WHEN (NEW.not_before IS NOT NULL) EXECUTE FUNCTION outbox_not_before();
