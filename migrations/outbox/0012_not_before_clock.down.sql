-- Back to version 11: the trigger fires for every row with a not_before.
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
CREATE OR REPLACE TRIGGER outbox_not_before BEFORE INSERT ON outbox
    FOR EACH ROW WHEN (NEW.not_before IS NOT NULL) EXECUTE FUNCTION outbox_not_before();
