-- txoutbox schema, version 8: the claim floor.
--
-- The claim walks the first attempts in id order from the lowest. Rows
-- published since the last VACUUM keep their entries in that index until
-- it runs, so on a large drained backlog every claim read them all. The
-- floor is an id below which no row can be a first attempt again: relays
-- raise it once a proof holds (every transaction running when it was
-- taken has ended, so no lower id can still commit), the claim walks from
-- it, and operators who return rows to pending (dead retry, replay) lower
-- it in the same transaction. One row; 0 walks from the start.
CREATE TABLE IF NOT EXISTS outbox_claim_floor (
    one   boolean PRIMARY KEY DEFAULT true CHECK (one),
    floor bigint  NOT NULL DEFAULT 0,
    gen   bigint  NOT NULL DEFAULT 0
);
INSERT INTO outbox_claim_floor (one) VALUES (true) ON CONFLICT DO NOTHING;
