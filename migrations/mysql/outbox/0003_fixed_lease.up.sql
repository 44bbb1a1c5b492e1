-- txoutbox schema for MySQL 8.0+ and MariaDB 10.6+, version 3: a claim's
-- lease and a mark that rewrite their rows in place.
--
-- The writers insert rows back to back in id order, so InnoDB packs the
-- clustered index's pages full. An UPDATE that changes the size of a
-- column is no in-place update: InnoDB deletes the record and inserts it
-- again, reorganizing the page or splitting it when it no longer fits.
-- Version 2's lease columns were NULL from the insert, so the claim's
-- lease grew every row it took by the token and the time (about 4 KB of
-- redo a row, more than the insert), and the mark grew it again: state
-- 'pending' to 'published' in a VARCHAR, published_at from NULL, lane
-- to NULL. Here each of these columns has a fixed size and a value from
-- the insert on (their defaults: no writer names them), so the lease and
-- the mark change a row's bytes without changing its size:
--
--   * lease_owner BINARY(16) is the holder's key, not its token: the
--     first 16 bytes of the SHA-256 of the incarnation's token
--     ("<Config.ID>#<random>", of no fixed length). Two live incarnations
--     share a key with a chance of about 2^-128. Statements that look a
--     holder up in outbox_relays compute the key of each relay's id there
--     (UNHEX(LEFT(SHA2(id, 256), 32))); that table has a row per live
--     relay and no column for it. A row no one holds has sixteen zero
--     bytes.
--   * lease_expires_at DATETIME(6) NOT NULL: the lease's end, which fences
--     the settlement of a claim as before; a row no one holds has
--     '1000-01-01 00:00:00', the schema's '-infinity', long expired.
--   * published_at DATETIME(6) NOT NULL: '1000-01-01 00:00:00' until the
--     row is published. A dead row has that value, so the dead rows in id
--     order are still one range of outbox_prune_idx (state, published_at,
--     id): state = 'dead' AND published_at = '1000-01-01 00:00:00'.
--   * state ENUM of the four states: one byte whatever the state. (A
--     CHAR(9) would be fixed too, but MariaDB refuses a CHAR column in an
--     indexed generated column's expression, lane's, whose value could
--     then follow sql_mode's PAD_CHAR_TO_FULL_LENGTH.) The statements
--     compare it with the same strings; no statement sorts by it but
--     within one state.
--   * lane is 0, not NULL, for a published or dead row: the claim reads
--     lanes 1 and 2 only, and the operators read lane 0 where they read
--     NULL. (The mark still moves the row's entries in the indexes led by
--     lane.)
--
-- The conversion: NULLs become those values; a leased row keeps its lease
-- under its holder's key, so a relay of this version fences it as its
-- holder's, and takes it once the lease ends or the holder leaves. Relays
-- of version 2 must be stopped first: they write tokens, which the new
-- column refuses. Each statement can run again over what an interrupted
-- run left (see the Migrator): lease_owner becomes VARBINARY to hold both
-- tokens and keys, the UPDATE converts only what is no key yet (a NULL, or
-- a token: longer or shorter than 16 bytes, or of 16 with the '#' and the
-- eight hexadecimal digits that end every token), and the last ALTER sets
-- the final types. The ALTERs rebuild the table, and the UPDATEs read
-- every row and write the unpublished ones: run it after a prune when the
-- table is large.
UPDATE outbox SET lease_expires_at = '1000-01-01 00:00:00' WHERE lease_expires_at IS NULL;
UPDATE outbox SET published_at = '1000-01-01 00:00:00' WHERE published_at IS NULL;
ALTER TABLE outbox MODIFY COLUMN lease_owner VARBINARY(255) NULL;
UPDATE outbox
SET lease_owner = IF(lease_owner IS NULL, X'00000000000000000000000000000000', UNHEX(LEFT(SHA2(lease_owner, 256), 32)))
WHERE lease_owner IS NULL OR LENGTH(lease_owner) <> 16
   OR (SUBSTRING(lease_owner, 8, 1) = X'23' AND UNHEX(SUBSTRING(lease_owner, 9)) IS NOT NULL);
ALTER TABLE outbox
    MODIFY COLUMN state ENUM('pending', 'claimed', 'published', 'dead') CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'pending',
    MODIFY COLUMN lease_owner BINARY(16) NOT NULL DEFAULT X'00000000000000000000000000000000',
    MODIFY COLUMN lease_expires_at DATETIME(6) NOT NULL DEFAULT '1000-01-01 00:00:00',
    MODIFY COLUMN published_at DATETIME(6) NOT NULL DEFAULT '1000-01-01 00:00:00',
    MODIFY COLUMN lane TINYINT GENERATED ALWAYS AS (CASE WHEN state IN ('pending', 'claimed') THEN IF(retry_at > '1000-01-01 00:00:00', 2, 1) ELSE 0 END) STORED;
