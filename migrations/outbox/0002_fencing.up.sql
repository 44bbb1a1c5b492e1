-- txoutbox schema, version 2: relay incarnations.
--
-- A relay claims a row only if every earlier unpublished row of its
-- aggregate is claimed by the same relay incarnation or taken in the same
-- claim (the claim checks it over the rows it walks; no index is added).
-- Relays register one row per incarnation (each Run of a relay), named
-- "<name>#<random>" in id, lease_owner and the shards' owner; name is the
-- configured relay id, which restarts under a fixed id (a StatefulSet pod
-- name) share. A new incarnation deletes the earlier ones of its name.
ALTER TABLE outbox_relays ADD COLUMN name text NOT NULL DEFAULT '';
