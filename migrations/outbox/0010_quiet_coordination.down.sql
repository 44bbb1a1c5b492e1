ALTER TABLE outbox_claim_floor RESET (autovacuum_vacuum_threshold);
ALTER TABLE outbox_relays RESET (autovacuum_vacuum_threshold);
