-- txoutbox schema, version 5: indexes that bound the cost of pruning and of
-- the operators' look-ups by the size of their batch.
--
-- Pruning deletes the published rows past the retention window oldest
-- first: on this index it reads only those rows, however many dead or
-- unpublished rows precede them in the primary key. Replay selects
-- published rows by published_at on it too. Claims never change
-- published_at or state, so they stay heap-only updates.
CREATE INDEX IF NOT EXISTS outbox_prune_idx ON outbox (published_at) WHERE state = 'published';

-- The unpublished rows of an aggregate, in id order: what `outbox dead
-- retry` locks while it holds the claim gate, the aggregate look-up, and
-- the handover check's probe. Small like the claim index.
CREATE INDEX IF NOT EXISTS outbox_aggregate_idx ON outbox (aggregate_id, id) WHERE state IN ('pending', 'claimed');

-- The dead rows of an aggregate, for the aggregate look-up: dead letters
-- kept for weeks are not read one by one to find an aggregate's.
CREATE INDEX IF NOT EXISTS outbox_dead_agg_idx ON outbox (aggregate_id, id) WHERE state = 'dead';

-- Retries apart from first attempts, so a claim never walks the rows in
-- retry backoff. retry_at is when a row's retry is due: set by the relay
-- when a publish fails, '-infinity' for a row never failed (or returned to
-- pending by an operator). Claims do not change it, so they stay heap-only
-- updates. The claim walks the first attempts in id order on
-- outbox_fresh_idx, takes the retries whose retry_at has passed on
-- outbox_retry_idx, and checks an aggregate for retries ahead of a row on
-- outbox_retry_agg_idx. Rows failed before this version keep their
-- backoff.
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS retry_at timestamptz NOT NULL DEFAULT '-infinity';
UPDATE outbox SET retry_at = next_attempt_at WHERE state IN ('pending', 'claimed') AND attempts > 0;
CREATE INDEX IF NOT EXISTS outbox_fresh_idx ON outbox (id) WHERE state IN ('pending', 'claimed') AND retry_at = '-infinity';
CREATE INDEX IF NOT EXISTS outbox_retry_idx ON outbox (retry_at) WHERE state IN ('pending', 'claimed') AND retry_at > '-infinity';
CREATE INDEX IF NOT EXISTS outbox_retry_agg_idx ON outbox (aggregate_id, id) WHERE state IN ('pending', 'claimed') AND retry_at > '-infinity';
