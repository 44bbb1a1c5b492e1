-- txoutbox schema, version 5: indexes that bound the cost of pruning and of
-- the operators' look-ups by the size of their batch.
--
-- Pruning deletes the published rows past the retention window oldest
-- first: on this index it reads only those rows, however many dead or
-- unpublished rows precede them in the primary key. Replay selects
-- published rows by published_at on it too. Claims never change
-- published_at or state, so they stay heap-only updates.
CREATE INDEX outbox_prune_idx ON outbox (published_at) WHERE state = 'published';

-- The unpublished rows of an aggregate, in id order: what `outbox dead
-- retry` locks while it holds the claim gate, the aggregate look-up, and
-- the handover check's probe. Small like the claim index.
CREATE INDEX outbox_aggregate_idx ON outbox (aggregate_id, id) WHERE state IN ('pending', 'claimed');
