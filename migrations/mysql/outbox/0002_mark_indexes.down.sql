-- Back to version 1's indexes.
ALTER TABLE outbox
    DROP INDEX outbox_lane_idx,
    ADD INDEX outbox_fresh_idx (lane, id, shard),
    ADD INDEX outbox_retry_idx (lane, retry_at),
    ADD INDEX outbox_state_idx (state, id),
    ADD INDEX outbox_topic_due_idx (topic, lane, due_at);
