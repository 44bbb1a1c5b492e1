-- txoutbox schema, version 11: the check of a WAL relay's slot reads the
-- publications from the catalogs.
--
-- Version 9's check (a future not_before refused on a table a WAL relay's
-- slot streams) called pg_get_publication_tables for every publication,
-- which looks the publication up by name in the current catalog rather
-- than under the statement's snapshot: a publication dropped after the
-- snapshot was taken (any DROP PUBLICATION running alongside, or since a
-- REPEATABLE READ writer's transaction began) failed the writer's insert
-- with "publication ... does not exist". It now reads the catalog rows:
-- a FOR ALL TABLES publication, one that lists the table or a partition
-- ancestor, or one that lists the schema of either (PostgreSQL 15's FOR
-- TABLES IN SCHEMA, found through pg_depend, as pg_publication_namespace
-- does not exist on 14). outboxsql's publicationCarries is the same test.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_not_before() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    slot text;
BEGIN
    IF current_setting('txoutbox.unstreamed_' || TG_RELID::text, true) IS DISTINCT FROM 'yes' THEN
        SELECT s.slot_name INTO slot
        FROM pg_replication_slots s
        WHERE s.slot_type = 'logical' AND s.plugin = 'pgoutput' AND s.database = current_database()
          AND EXISTS (SELECT 1 FROM pg_publication p
                      WHERE (p.puballtables
                          OR EXISTS (SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = p.oid
                                       AND pr.prrelid IN (SELECT TG_RELID UNION ALL SELECT relid FROM pg_partition_ancestors(TG_RELID)))
                          OR EXISTS (SELECT 1 FROM pg_depend d JOIN pg_depend dn ON dn.classid = d.classid AND dn.objid = d.objid
                                     WHERE d.classid = to_regclass('pg_catalog.pg_publication_namespace') AND d.refclassid = 'pg_catalog.pg_publication'::regclass
                                       AND d.refobjid = p.oid AND dn.refclassid = 'pg_catalog.pg_namespace'::regclass
                                       AND dn.refobjid IN (SELECT c.relnamespace FROM pg_class c
                                                           WHERE c.oid IN (SELECT TG_RELID UNION ALL SELECT relid FROM pg_partition_ancestors(TG_RELID)))))
                        AND (p.pubname = s.slot_name
                          OR substring(obj_description(p.oid, 'pg_publication') FROM '^txoutbox: (?:initialising )?slot (\S+)') = s.slot_name))
        LIMIT 1;
        IF slot IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'TXO01',
                MESSAGE = format('%s is streamed by the WAL relay''s slot %s, which publishes every event at commit: an event with a future NotBefore would go out early',
                                 coalesce(pg_partition_root(TG_RELID), TG_RELID)::regclass, slot),
                HINT = 'Delayed events need the polling relay (outbox wal takeover hands the table back to it).';
        END IF;
        PERFORM set_config('txoutbox.unstreamed_' || TG_RELID::text, 'yes', true);
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
