-- txoutbox schema for MySQL 8.0+ and MariaDB 10.6+, version 1: the outbox
-- table and the relay's coordination tables, with the meaning of the
-- PostgreSQL schema's columns after its version 12 (migrations/outbox).
--
-- Differences from PostgreSQL, and why:
--   * Times are DATETIME(6) in UTC (the statements use UTC_TIMESTAMP(6));
--     TIMESTAMP converts by the session's time zone and ends in 2038.
--     '1000-01-01 00:00:00' stands for PostgreSQL's '-infinity'.
--   * event_id is the UUID's canonical text; the writers only write that.
--   * aggregate_id is VARBINARY(1024): byte equality, as PostgreSQL's text
--     compares, where a _ci collation would merge "A" and "a"; 1,024 bytes
--     is the writer's limit (txoutbox.MaxAggregateIDBytes) and still fits
--     InnoDB's 3,072-byte index key with the id.
--   * headers is JSON: a binary type on MySQL, LONGTEXT with a JSON_VALID
--     check on MariaDB; both reject text that is not JSON.
--   * shard is CRC32(aggregate_id) & 255 (PostgreSQL has hashtext): the
--     same role, other numbers; a table is only ever read by one kind.
--   * There are no partial indexes. A stored generated column, lane,
--     stands in for their WHERE: 1 for a first attempt, 2 for a retry
--     (retry_at set), NULL once published or dead. Indexes led by lane
--     keep the claim's reads to the unpublished rows however many
--     published ones retention keeps, as PostgreSQL's partial indexes do.
--   * No NOTIFY: relays poll. No trigger: the WAL relay is PostgreSQL's.
--
-- What the claim (the relay, not here yet) must do on InnoDB, and the
-- columns kept for it:
--   * AUTO_INCREMENT ids are taken at insert and transactions commit in
--     another order (innodb_autoinc_lock_mode = 2), so an id is not a
--     commit order: a lower id can appear after a higher one was claimed.
--     The claim walks first attempts in id order on outbox_fresh_idx and
--     must keep the per-aggregate invariant the PostgreSQL claim keeps
--     (internal/outboxsql/claim.md) by locking reads, not by snapshots: a
--     locking read sees the latest committed rows, not the transaction's
--     snapshot, under REPEATABLE READ as under READ COMMITTED.
--   * No RETURNING: a claim is a SELECT ... FOR UPDATE SKIP LOCKED of the
--     due rows (ids and what to publish), then an UPDATE of those ids
--     setting state, lease_owner and lease_expires_at, in one short
--     READ COMMITTED transaction (no gap locks held on the index walked).
--   * The claim floor (outbox_claim_floor) may only pass an id once no
--     transaction that could still insert below it is open: its proof
--     reads information_schema.innodb_trx (trx_started of every open
--     transaction, which needs the PROCESS privilege) where PostgreSQL's
--     reads xmax and pg_locks.
--   * Coordination (outbox_relays, outbox_shards) is as on PostgreSQL;
--     the lease and fencing columns are the same.
CREATE TABLE IF NOT EXISTS outbox (
    id               BIGINT          NOT NULL AUTO_INCREMENT,
    event_id         CHAR(36)        CHARACTER SET ascii COLLATE ascii_general_ci NOT NULL,
    topic            VARCHAR(255)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    aggregate_type   VARCHAR(255)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    aggregate_id     VARBINARY(1024) NOT NULL,
    event_type       VARCHAR(255)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    content_type     VARCHAR(255)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT 'application/json',
    payload          LONGBLOB        NOT NULL,
    headers          JSON            NOT NULL,
    created_at       DATETIME(6)     NOT NULL,
    not_before       DATETIME(6)     NULL,
    shard            SMALLINT        GENERATED ALWAYS AS (CRC32(aggregate_id) & 255) STORED,
    state            VARCHAR(9)      CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'pending',
    attempts         INT             NOT NULL DEFAULT 0,
    retry_at         DATETIME(6)     NOT NULL DEFAULT '1000-01-01 00:00:00',
    lease_owner      VARCHAR(255)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    lease_expires_at DATETIME(6)     NULL,
    last_error       TEXT            NULL,
    published_at     DATETIME(6)     NULL,
    lane             TINYINT         GENERATED ALWAYS AS (CASE WHEN state IN ('pending', 'claimed') THEN IF(retry_at > '1000-01-01 00:00:00', 2, 1) END) STORED,
    due_at           DATETIME(6)     GENERATED ALWAYS AS (GREATEST(created_at, COALESCE(not_before, created_at))) STORED,
    PRIMARY KEY (id),
    CONSTRAINT outbox_state_check CHECK (state IN ('pending', 'claimed', 'published', 'dead')),
    -- First attempts in id order, with the shard to filter on.
    KEY outbox_fresh_idx (lane, id, shard),
    -- Retries in retry_at order.
    KEY outbox_retry_idx (lane, retry_at),
    -- An aggregate's unpublished rows, first attempts and retries apart.
    KEY outbox_aggregate_idx (aggregate_id, lane, id),
    -- Dead letters and retention (published rows by age).
    KEY outbox_state_idx (state, id),
    KEY outbox_prune_idx (state, published_at),
    -- Lag: the oldest due unpublished row, overall and by topic.
    KEY outbox_due_idx (lane, due_at),
    KEY outbox_topic_due_idx (topic, lane, due_at),
    -- Operators find an event by id (replay, dead).
    KEY outbox_event_idx (event_id)
) ENGINE = InnoDB;

-- Live relays: each heartbeats its row; a row older than the stale timeout
-- belongs to a dead relay, whose shards are taken over.
CREATE TABLE IF NOT EXISTS outbox_relays (
    id           VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    host         VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    name         VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    started_at   DATETIME(6)  NOT NULL,
    heartbeat_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB;

-- Shard ownership: at most one relay publishes a shard at a time.
CREATE TABLE IF NOT EXISTS outbox_shards (
    shard      SMALLINT     NOT NULL,
    owner      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    updated_at DATETIME(6)  NOT NULL DEFAULT '1000-01-01 00:00:00',
    PRIMARY KEY (shard)
) ENGINE = InnoDB;

-- The 256 shards, 0 to 255 (no generate_series: a cross join of digits).
INSERT IGNORE INTO outbox_shards (shard)
SELECT a.d * 16 + b.d FROM
    (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
     UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) AS a
    CROSS JOIN
    (SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
     UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15) AS b;

-- The claim floor: one row, the id below which no row can be a first
-- attempt again, and a generation operators bump when they lower it.
CREATE TABLE IF NOT EXISTS outbox_claim_floor (
    one   TINYINT NOT NULL DEFAULT 1,
    floor BIGINT  NOT NULL DEFAULT 0,
    gen   BIGINT  NOT NULL DEFAULT 0,
    PRIMARY KEY (one),
    CONSTRAINT outbox_claim_floor_one CHECK (one = 1)
) ENGINE = InnoDB;
INSERT IGNORE INTO outbox_claim_floor (one) VALUES (1);
