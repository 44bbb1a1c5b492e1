-- Back to version 2's columns: state a VARCHAR, and published_at, the
-- lease and lane NULL when unset. A lease's key cannot become its token again,
-- except by the relays table: a lease whose holder is still there gets its
-- id back (a relay of version 2 fences it as its holder's); any other
-- keeps its key in hex, a holder no relay is, so a relay of version 2
-- takes the row at once, as it takes any row whose holder left. Each
-- statement can run again over what an interrupted run left.
ALTER TABLE outbox
    MODIFY COLUMN state VARCHAR(9) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'pending',
    MODIFY COLUMN lease_owner VARBINARY(255) NULL,
    MODIFY COLUMN lease_expires_at DATETIME(6) NULL,
    MODIFY COLUMN published_at DATETIME(6) NULL,
    MODIFY COLUMN lane TINYINT GENERATED ALWAYS AS (CASE WHEN state IN ('pending', 'claimed') THEN IF(retry_at > '1000-01-01 00:00:00', 2, 1) END) STORED;
UPDATE outbox o JOIN outbox_relays r ON o.lease_owner = UNHEX(LEFT(SHA2(r.id, 256), 32))
SET o.lease_owner = r.id;
UPDATE outbox SET lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = X'00000000000000000000000000000000';
UPDATE outbox SET lease_owner = LOWER(HEX(lease_owner))
WHERE LENGTH(lease_owner) = 16 AND lease_owner NOT IN (SELECT r.id FROM outbox_relays r);
UPDATE outbox SET published_at = NULL WHERE published_at = '1000-01-01 00:00:00';
ALTER TABLE outbox MODIFY COLUMN lease_owner VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL;
