-- txoutbox consumer inbox for MySQL 8.0+ and MariaDB 10.6+, version 1: the
-- events each consumer has processed (migrations/inbox is PostgreSQL's).
--
-- A consumer inserts (consumer, event_id) in the same transaction as the
-- business change the event causes, with INSERT IGNORE: a row that already
-- exists means the event was processed, so the redelivery is skipped. A
-- concurrent duplicate waits on the first transaction's row lock and then
-- skips (first committed) or proceeds (first rolled back).
--
-- consumer is VARBINARY(255): byte equality, as PostgreSQL's text compares;
-- the inbox refuses a longer name rather than let INSERT IGNORE cut it.
-- event_id is the UUID's canonical text (the inbox parses it first), and
-- processed_at is UTC.
CREATE TABLE IF NOT EXISTS inbox (
    consumer     VARBINARY(255) NOT NULL,
    event_id     CHAR(36)       CHARACTER SET ascii COLLATE ascii_general_ci NOT NULL,
    processed_at DATETIME(6)    NOT NULL,
    PRIMARY KEY (consumer, event_id),
    -- Pruning deletes the oldest rows first, in batches, by processed_at.
    KEY inbox_processed_at_idx (processed_at)
) ENGINE = InnoDB;
