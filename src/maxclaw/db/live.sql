-- The programmable part of the schema, as `alembic upgrade head` leaves it: the one sequence,
-- the functions and the triggers that drive live updates. Tables, keys and indexes are declared
-- in schema.py; this file is the rest, so a reader sees the whole database in those two places.
--
-- Migrations stay the history (each writes out the definition it installs, frozen); this file is
-- the present. tests/integration/test_schema.py builds a database from schema.py + this file and
-- requires it to equal the migrated one, definitions included (whitespace aside): a migration
-- that changes a function or trigger must change it here too, or that test fails.

-- One global sequence orders every synced row (threads, messages, decisions) across tables.
CREATE SEQUENCE maxclaw_rev_seq;

-- Every insert and update of a synced row takes a new rev from the sequence and records the
-- writing transaction (xid8), so a client's cursor (xid, rev) never skips a late committer.
-- The NOTIFY is only a hint (table, id, rev, user, xid; never row contents); PostgreSQL delivers
-- it at commit and never after a rollback. `SET LOCAL maxclaw.notify = 'off'` skips it for a
-- transaction (bulk jobs that announce themselves another way). The table is named by the
-- trigger's argument: on a table partitioned by user (maxclaw db partition) TG_TABLE_NAME is the
-- partition's name, and the hint must say "threads", not "threads_p3" (0006_user_keys).
CREATE FUNCTION maxclaw_stamp_rev() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER threads_stamp_rev BEFORE INSERT OR UPDATE ON threads
    FOR EACH ROW EXECUTE FUNCTION maxclaw_stamp_rev('threads');
CREATE TRIGGER messages_stamp_rev BEFORE INSERT OR UPDATE ON messages
    FOR EACH ROW EXECUTE FUNCTION maxclaw_stamp_rev('messages');
CREATE TRIGGER decisions_stamp_rev BEFORE INSERT OR UPDATE ON decisions
    FOR EACH ROW EXECUTE FUNCTION maxclaw_stamp_rev('decisions');

-- threads.turn_state follows the thread's active turn (running > queued > idle), and a queued
-- turn wakes waiting runtimes: NOTIFY maxclaw_turn with the user id as payload.
CREATE FUNCTION maxclaw_turn_changed() RETURNS trigger LANGUAGE plpgsql AS $$
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
        PERFORM pg_notify('maxclaw_turn', NEW.user_id::text);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER turns_changed AFTER INSERT OR UPDATE OF status ON turns
    FOR EACH ROW EXECUTE FUNCTION maxclaw_turn_changed();

-- threads.open_cards counts the thread's unsettled questions (open, with-main, handed-back,
-- revoked: machine.UNSETTLED), for the thread's derived state (running / waiting for you /
-- idle). Deferred to the commit, so the thread row is the last lock a card's writer takes; the
-- write gives the thread a new rev, so every client's thread list follows live (0006_life_b).
-- The thread is found by its key (user_id, id): by id alone it was a scan of every thread
-- (0007_open_cards_key).
CREATE FUNCTION maxclaw_open_cards_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    delta int := 0;
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.status IN ('open', 'with-main', 'handed-back', 'revoked') THEN
        delta := delta + 1;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.status IN ('open', 'with-main', 'handed-back', 'revoked') THEN
        delta := delta - 1;
    END IF;
    IF delta <> 0 THEN
        UPDATE threads SET open_cards = greatest(open_cards + delta, 0)
         WHERE user_id = coalesce(NEW.user_id, OLD.user_id) AND id = coalesce(NEW.thread_id, OLD.thread_id);
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER message_components_open_cards
    AFTER INSERT OR DELETE OR UPDATE OF status ON message_components
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION maxclaw_open_cards_changed();
