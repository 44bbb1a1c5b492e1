-- txoutbox schema, version 1: the outbox table and the relay's coordination tables.
--
-- Row life cycle (column "state"):
--   pending   -> written by the application; due when next_attempt_at <= now()
--   claimed   -> taken by a relay under a lease (lease_owner, lease_expires_at);
--                another relay may take it over once the lease has expired
--   published -> the broker acknowledged it (published_at); pruned after the retention window
--   pending   <- a failed publish returns it with attempts + 1, a backed-off
--                next_attempt_at and last_error
--   dead      <- after the relay's MaxAttempts; stays until an operator retries or drops it
--
-- Ordering: "shard" hashes aggregate_id into 256 shards. Each shard is owned
-- by one live relay at a time (outbox_shards), which publishes its rows in id order.
CREATE TABLE outbox (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id         uuid        NOT NULL,
    topic            text        NOT NULL,
    aggregate_type   text        NOT NULL DEFAULT '',
    aggregate_id     text        NOT NULL,
    event_type       text        NOT NULL,
    content_type     text        NOT NULL DEFAULT 'application/json',
    payload          bytea       NOT NULL,
    headers          jsonb       NOT NULL DEFAULT '{}',
    created_at       timestamptz NOT NULL DEFAULT now(),
    shard            smallint    NOT NULL GENERATED ALWAYS AS ((hashtext(aggregate_id) & 255)::smallint) STORED,
    state            text        NOT NULL DEFAULT 'pending'
                                 CHECK (state IN ('pending', 'claimed', 'published', 'dead')),
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    lease_expires_at timestamptz,
    last_error       text,
    published_at     timestamptz
);

-- The relay's claim walks this index in id order. It holds only unpublished
-- rows, so it stays small however many published rows are retained.
CREATE INDEX outbox_claim_idx ON outbox (id) WHERE state IN ('pending', 'claimed');

-- Aggregates that must hold back their later events: rows that failed and
-- wait for a retry. Small by construction, and not touched by claims.
CREATE INDEX outbox_fence_idx ON outbox (aggregate_id, id)
    WHERE state = 'pending' AND attempts > 0;

-- Dead letters, for operators.
CREATE INDEX outbox_dead_idx ON outbox (id) WHERE state = 'dead';

-- Live relays: each heartbeats its row; a row older than the stale timeout
-- belongs to a dead relay, whose shards are taken over.
CREATE TABLE outbox_relays (
    id           text        PRIMARY KEY,
    host         text        NOT NULL DEFAULT '',
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- Shard ownership: at most one relay publishes a shard at a time.
CREATE TABLE outbox_shards (
    shard      smallint    PRIMARY KEY,
    owner      text,
    updated_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO outbox_shards (shard) SELECT generate_series(0, 255);
