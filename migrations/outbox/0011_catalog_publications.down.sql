-- Back to version 9's check, which calls pg_get_publication_tables.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_not_before() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    slot text;
BEGIN
    IF current_setting('txoutbox.unstreamed_' || TG_RELID::text, true) IS DISTINCT FROM 'yes' THEN
        SELECT s.slot_name INTO slot
        FROM pg_replication_slots s
        WHERE s.slot_type = 'logical' AND s.plugin = 'pgoutput' AND s.database = current_database()
          AND EXISTS (SELECT 1 FROM pg_publication p, LATERAL pg_get_publication_tables(p.pubname::text) t
                      WHERE t.relid IN (TG_RELID, pg_partition_root(TG_RELID)) AND (p.pubname = s.slot_name
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
