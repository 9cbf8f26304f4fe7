-- the rev hint of 0029: one per user and transaction (user, xid)
CREATE OR REPLACE FUNCTION maxclaw_stamp_rev() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.rev := nextval('maxclaw_rev_seq');
    NEW.xid := pg_current_xact_id();
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
    END IF;
    IF coalesce(current_setting('maxclaw.notify', true), '') <> 'off' THEN
        PERFORM pg_notify('maxclaw_rev', json_build_object(
            'u', NEW.user_id, 'x', NEW.xid::text)::text);
    END IF;
    RETURN NEW;
END $$;
