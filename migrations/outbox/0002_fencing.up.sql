-- txoutbox schema, version 2: per-aggregate order enforced by the claim itself.
--
-- A relay claims a row only if every earlier unpublished row of its
-- aggregate is claimed by the same relay incarnation or taken in the same
-- claim. The claim checks that with this index: one short walk over an
-- aggregate's unpublished rows. It holds only pending and claimed rows, so
-- it stays as small as the backlog. On a large live table, build it first
-- with CREATE INDEX CONCURRENTLY under this name: this step then skips it.
CREATE INDEX IF NOT EXISTS outbox_aggregate_idx ON outbox (aggregate_id, id)
    WHERE state IN ('pending', 'claimed');

-- Relays register one row per incarnation (each Run of a relay), named
-- "<name>#<random>" in id, lease_owner and the shards' owner; name is the
-- configured relay id, which restarts under a fixed id (a StatefulSet pod
-- name) share. A new incarnation deletes the earlier ones of its name.
ALTER TABLE outbox_relays ADD COLUMN name text NOT NULL DEFAULT '';
