-- issue 33 item 1, 0030_hints_after_commit: the triggers of 0030: hints owed to the COMMIT by a transaction that says so (bench.ab_http --before-sql/--after-sql)

CREATE OR REPLACE FUNCTION maxclaw_owe_hint(setting text, hint text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    owed text;
BEGIN
    IF current_setting('maxclaw.notify', true) IS DISTINCT FROM 'after_commit' THEN
        RETURN false;
    END IF;
    owed := coalesce(current_setting(setting, true), '');
    IF owed = hint THEN
        RETURN true;
    ELSIF owed <> '' THEN
        RETURN false;
    END IF;
    PERFORM set_config(setting, hint, false);
    RETURN true;
END $$;

CREATE OR REPLACE FUNCTION maxclaw_send_owed_hints() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    rev text := coalesce(current_setting('maxclaw.owed_rev', true), '');
    turn text := coalesce(current_setting('maxclaw.owed_turn', true), '');
BEGIN
    IF rev <> '' THEN
        PERFORM pg_notify('maxclaw_rev', rev), set_config('maxclaw.owed_rev', '', false);
    END IF;
    IF turn <> '' THEN
        PERFORM pg_notify('maxclaw_turn', turn), set_config('maxclaw.owed_turn', '', false);
    END IF;
END $$;

CREATE OR REPLACE FUNCTION maxclaw_stamp_rev() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    hint text;
BEGIN
    NEW.rev := nextval('maxclaw_rev_seq');
    NEW.xid := pg_current_xact_id();
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
    END IF;
    IF coalesce(current_setting('maxclaw.notify', true), '') <> 'off' THEN
        hint := json_build_object('u', NEW.user_id, 'x', NEW.xid::text)::text;
        IF NOT maxclaw_owe_hint('maxclaw.owed_rev', hint) THEN
            PERFORM pg_notify('maxclaw_rev', hint);
        END IF;
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION maxclaw_turn_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    state text;
BEGIN
    SELECT CASE WHEN bool_or(status = 'running') THEN 'running'
                WHEN bool_or(status = 'queued') THEN 'queued'
                ELSE 'idle' END
      INTO state
      FROM turns WHERE user_id = NEW.user_id AND thread_id = NEW.thread_id
                   AND status IN ('queued', 'running');
    UPDATE threads SET turn_state = state
     WHERE user_id = NEW.user_id AND id = NEW.thread_id AND turn_state IS DISTINCT FROM state;
    IF NEW.status = 'queued' THEN
        IF NOT maxclaw_owe_hint('maxclaw.owed_turn', NEW.user_id::text) THEN
            PERFORM pg_notify('maxclaw_turn', NEW.user_id::text);
        END IF;
    END IF;
    RETURN NULL;
END $$;
