-- txoutbox schema for MySQL 8.0+ and MariaDB 10.6+, version 2: fewer
-- secondary indexes for a row's change of state to move.
--
-- InnoDB moves a row's entry in every secondary index whose key has a
-- column an UPDATE changes. The mark (published: state, lane and
-- published_at change) moved seven, and took about twice as long as on a
-- table without the five the claim does not read. This version keeps the
-- plans of every statement bounded by its batch or page, on four:
--
--   * outbox_lane_idx (lane, retry_at, id, shard) replaces outbox_fresh_idx
--     (lane, id, shard) and outbox_retry_idx (lane, retry_at). A first
--     attempt (lane 1) has retry_at '1000-01-01 00:00:00' (the writers'
--     MySQLNeverRetried), so lane 1 is in id order here, and lane 2 in
--     retry_at order as before; the claim reads both windows on it.
--   * outbox_state_idx (state, id) goes: a secondary index ends with the
--     primary key, so outbox_prune_idx (state, published_at) is (state,
--     published_at, id), and a dead row's published_at is NULL (nothing
--     makes a published row dead; a replay clears it first), so the dead
--     rows in id order are its range state = 'dead' AND published_at IS
--     NULL.
--   * outbox_topic_due_idx (topic, lane, due_at) goes: nothing reads it on
--     MySQL (per-topic stats are PostgreSQL's).
--   * outbox_aggregate_idx, outbox_prune_idx and outbox_due_idx (the lag)
--     stay, as does outbox_event_idx, which a mark does not move.
--
-- The claim's lease sets lease_owner and lease_expires_at only, in no
-- index: it moves none. One ALTER TABLE: both servers drop and build
-- secondary indexes in place, without copying the table, writes going on
-- (ALGORITHM=INPLACE, LOCK=NONE); the new index is built from one scan.
ALTER TABLE outbox
    DROP INDEX outbox_fresh_idx,
    DROP INDEX outbox_retry_idx,
    DROP INDEX outbox_state_idx,
    DROP INDEX outbox_topic_due_idx,
    ADD INDEX outbox_lane_idx (lane, retry_at, id, shard);
