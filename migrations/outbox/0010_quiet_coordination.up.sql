-- txoutbox schema, version 10: autovacuum leaves the relays' small
-- coordination tables to page pruning.
--
-- Relays update outbox_relays (every heartbeat), outbox_shards and
-- outbox_claim_floor all the time, in place (heap-only updates, no indexed
-- column changes), so page pruning keeps each at a page or two with no
-- VACUUM. An autovacuum of one still advances its relfrozenxid, an update
-- of pg_class that invalidates every cached plan reading the table, on
-- every connection: the claim reads outbox_relays and outbox_claim_floor,
-- and is planned again at its next run, in 3-6 ms against the 0.2 ms it
-- takes to run. At the default thresholds (50 changes) a heartbeat every
-- 2 s had each table vacuumed every minute or two; with one relay serving
-- a hundred tenants' outbox tables, planning claims again after those
-- vacuums was the largest share of PostgreSQL's time. 10,000 changes is
-- hours of heartbeats. Vacuums against transaction-id wraparound are not
-- affected, and the outbox table itself keeps the defaults: its rows come
-- and go.
ALTER TABLE outbox_relays SET (autovacuum_vacuum_threshold = 10000);
ALTER TABLE outbox_shards SET (autovacuum_vacuum_threshold = 10000);
ALTER TABLE outbox_claim_floor SET (autovacuum_vacuum_threshold = 10000);
