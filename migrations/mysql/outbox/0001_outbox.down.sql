DROP TABLE IF EXISTS outbox_claim_floor;
DROP TABLE IF EXISTS outbox_shards;
DROP TABLE IF EXISTS outbox_relays;
DROP TABLE IF EXISTS outbox;
