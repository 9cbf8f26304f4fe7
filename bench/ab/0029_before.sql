-- the rev hint before 0029: one per row (table, id, rev, user, xid)
CREATE OR REPLACE FUNCTION maxclaw_stamp_rev() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.rev := nextval('maxclaw_rev_seq');
    NEW.xid := pg_current_xact_id();
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
    END IF;
    IF coalesce(current_setting('maxclaw.notify', true), '') <> 'off' THEN
        PERFORM pg_notify('maxclaw_rev', json_build_object(
            't', coalesce(TG_ARGV[0], TG_TABLE_NAME), 'id', NEW.id, 'rev', NEW.rev,
            'u', NEW.user_id, 'x', NEW.xid::text)::text);
    END IF;
    RETURN NEW;
END $$;
