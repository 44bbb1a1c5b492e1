-- txoutbox schema, version 4: the lag index.
--
-- Lag is the age of the oldest unpublished event by created_at, which an
-- application may set and which clocks may skew, so it is not in id order:
-- the claim index (by id) cannot find that row without reading every entry.
-- This index holds only unpublished rows, like the claim index, and a claim
-- (lease columns only) changes none of its columns, so claims stay
-- heap-only updates; each write adds one entry.
CREATE INDEX outbox_lag_idx ON outbox (created_at) WHERE state IN ('pending', 'claimed');
