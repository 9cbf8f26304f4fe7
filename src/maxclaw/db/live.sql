-- The programmable part of the schema, as `alembic upgrade head` leaves it: the one sequence,
-- the functions and the triggers that drive live updates. Tables, keys and indexes are declared
-- in schema.py; this file is the rest, so a reader sees the whole database in those two places.
--
-- Migrations stay the history (each writes out the definition it installs, frozen); this file is
-- the present. tests/integration/test_schema.py builds a database from schema.py + this file and
-- requires it to equal the migrated one, definitions included (whitespace aside): a migration
-- that changes a function or trigger must change it here too, or that test fails.

-- Hints after the commit (0030_hints_after_commit), an operator's choice. A transaction that
-- NOTIFYs takes a lock shared by the whole cluster at its pre-commit and holds it until its
-- commit record is on disk, so notifying commits are flushed one after the other, every user's
-- alike: on a disk whose flush takes 2 ms, the round trip's rate fell from four clients to
-- sixteen (docs/benchmarks.md, issue 33 item 1, "Hints after the commit"). A transaction that
-- says `SET LOCAL maxclaw.notify = 'after_commit'` promises to run maxclaw_send_owed_hints()
-- right after its COMMIT (the service does both in the round trips of its BEGIN and COMMIT when
-- MAXCLAW_HINTS_AFTER_COMMIT is on, db/database.py); its triggers keep the hint in a session
-- setting instead, which a rollback takes back with the rows. One hint per channel is owed:
-- another (a second user in one transaction) is NOTIFYed inside the transaction as before. A
-- hint owed and never sent (the process died between the two) costs the realtime hub its next
-- tick and a waiting claim its next poll: a hint is never the truth, the rows are.
CREATE FUNCTION maxclaw_owe_hint(setting text, hint text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    owed text := coalesce(current_setting(setting, true), '');
BEGIN
    IF owed = hint THEN
        RETURN true;
    ELSIF owed <> '' THEN
        RETURN false;
    END IF;
    PERFORM set_config(setting, hint, false);
    RETURN true;
END $$;

-- Sends what this session's committed transactions owe (nothing for one that wrote no synced
-- row: then it takes no transaction id and no lock) and forgets it.
CREATE FUNCTION maxclaw_send_owed_hints() RETURNS void LANGUAGE plpgsql AS $$
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

-- One global sequence orders every synced row (threads, messages, decisions) across tables.
CREATE SEQUENCE maxclaw_rev_seq;

-- Every insert and update of a synced row takes a new rev from the sequence and records the
-- writing transaction (xid8), so a client's cursor (xid, rev) never skips a late committer.
-- The NOTIFY is only a hint: the user and the writing transaction, never row contents, so the
-- rows one transaction writes for a user send identical payloads, which PostgreSQL delivers
-- once (0029_hint_per_transaction: five hints per answer became one). It is delivered at commit
-- and never after a rollback. `SET LOCAL maxclaw.notify = 'off'` skips it for a transaction
-- (bulk jobs that announce themselves another way); `'after_commit'` owes it to the committer
-- instead (maxclaw_owe_hint above).
-- The triggers still pass their table's name (0006_user_keys), which the hint no longer carries.
CREATE FUNCTION maxclaw_stamp_rev() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    notify text := coalesce(current_setting('maxclaw.notify', true), '');
    hint text;
BEGIN
    NEW.rev := nextval('maxclaw_rev_seq');
    NEW.xid := pg_current_xact_id();
    IF TG_OP = 'UPDATE' THEN
        NEW.updated_at := now();
    END IF;
    IF notify <> 'off' THEN
        hint := json_build_object('u', NEW.user_id, 'x', NEW.xid::text)::text;
        IF notify <> 'after_commit' THEN
            PERFORM pg_notify('maxclaw_rev', hint);
        ELSIF NOT maxclaw_owe_hint('maxclaw.owed_rev', hint) THEN
            PERFORM pg_notify('maxclaw_rev', hint);
        END IF;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER threads_stamp_rev BEFORE INSERT OR UPDATE ON threads
    FOR EACH ROW EXECUTE FUNCTION maxclaw_stamp_rev('threads');
CREATE TRIGGER messages_stamp_rev BEFORE INSERT OR UPDATE ON messages
    FOR EACH ROW EXECUTE FUNCTION maxclaw_stamp_rev('messages');
CREATE TRIGGER decisions_stamp_rev BEFORE INSERT OR UPDATE ON decisions
    FOR EACH ROW EXECUTE FUNCTION maxclaw_stamp_rev('decisions');

-- A message's derived columns (0027_messages_derived): its size (schema.MESSAGE_SIZE: what a
-- page spends on the row) and its two search documents (search_sql.SEARCH_FTS, SEARCH_HAN; NULL
-- on a row that may hold a secret), computed by this trigger on every write. They were stored
-- generated columns; PostgreSQL 15 parses and plans a generated column's expression again at
-- the start of every statement that writes the table (ExecInitStoredGenerated), ~40 µs per
-- statement for these three, where PL/pgSQL keeps its expressions planned for the session. The
-- text the documents are made from is computed once (a generated column computed it twice), and
-- an update that leaves the text alone (the card mirror writes `display`) keeps the documents.
-- tests/integration/test_messages_derived.py checks every value against the declared
-- expressions.
CREATE FUNCTION maxclaw_messages_derived() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    doc text;
BEGIN
    NEW.size := octet_length(coalesce(NEW.body, ''))
        + octet_length(coalesce(NEW.content::text, ''))
        + 2 * octet_length(coalesce(NEW.tool_calls::text, ''))
        + octet_length(coalesce(NEW.display::text, ''))
        + octet_length(coalesce(NEW.source_meta::text, ''))
        + octet_length(coalesce(NEW.tool_call_id, ''));
    IF TG_OP = 'UPDATE' AND NEW.body IS NOT DISTINCT FROM OLD.body
       AND NEW.tool_calls IS NOT DISTINCT FROM OLD.tool_calls
       AND NEW.role IS NOT DISTINCT FROM OLD.role
       AND NEW.sensitive IS NOT DISTINCT FROM OLD.sensitive THEN
        NEW.search_fts := OLD.search_fts;
        NEW.search_han := OLD.search_han;
    ELSIF NOT NEW.sensitive AND NEW.role IN ('user', 'assistant') THEN
        doc := left(coalesce(NEW.body, '') || ' ' || coalesce(jsonb_path_query_array(
                   NEW.tool_calls, 'strict $[*]?(@."name" == "ask_user_question")'
                   '."arguments".**?(@.type() == "string")')::text, ''), 20000);
        NEW.search_fts := to_tsvector('english', doc);
        NEW.search_han := to_tsvector('simple', regexp_replace(doc, '([一-鿿])', ' \1 ', 'g'));
    ELSE
        NEW.search_fts := NULL;
        NEW.search_han := NULL;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER messages_derived BEFORE INSERT OR UPDATE ON messages
    FOR EACH ROW EXECUTE FUNCTION maxclaw_messages_derived();

-- threads.turn_state follows the thread's active turn (running > queued > idle), and a queued
-- turn wakes waiting runtimes: NOTIFY maxclaw_turn with the user id as payload (owed to the
-- committer when it says so, as the rev hint is).
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
        IF current_setting('maxclaw.notify', true) IS DISTINCT FROM 'after_commit' THEN
            PERFORM pg_notify('maxclaw_turn', NEW.user_id::text);
        ELSIF NOT maxclaw_owe_hint('maxclaw.owed_turn', NEW.user_id::text) THEN
            PERFORM pg_notify('maxclaw_turn', NEW.user_id::text);
        END IF;
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

-- The Live Activity of each of a user's APNs devices shows every open decision of the user
-- (docs/rich-message.md, "Live Activity"). Called by the decisions triggers below (in the
-- transaction that opens or settles a decision) and when a device registers an activity token.
-- Per device it queues one `activity` outbox row carrying the whole new state: `update` while a
-- decision is open and the device has an activity token, `end` when none is (the token is then
-- forgotten: an ended activity takes no more pushes), `start` on the push-to-start token when a
-- decision is open, no activity token is known and no start went out in the last ten minutes
-- (the app registers the started activity's token, which queues its first update). Pending
-- updates and starts of the device are superseded: the new row carries all they did. A lock per
-- user serialises two transactions settling two of the user's decisions, so the second one
-- computes its state after the first committed and neither leaves a settled card on show.
-- One user at a time, each statement naming him (`= u`), and the queueing function keeps its
-- generic plans (0026_live_activity_per_user): planned once per connection, where the array's
-- custom plans were made on every call, and on a schema partitioned by user each generic plan
-- reads that user's partition only (an array parameter, or a join to one, cannot be pruned).
-- The check and the locks run without that setting (0028_live_activity_check): a function's
-- `SET` is saved and restored on every call, and the decisions triggers call this one twice per
-- round trip, nearly always for a user without a Live Activity (3% of PostgreSQL's CPU at 16
-- clients, python -m bench.profile postgres); its one query by `u` keeps a generic plan anyway.
-- One user (the round trip's case) is read without a query over the array.
-- (The queueing half, called by the check with the users' locks held.)
CREATE FUNCTION maxclaw_queue_live_activities(users uuid[]) RETURNS integer LANGUAGE plpgsql
    SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    u uuid;
    queued integer := 0;
    queued_now integer;
BEGIN
    FOREACH u IN ARRAY users
    LOOP
        WITH devices AS (
            SELECT d.id, d.config FROM push_devices AS d
             WHERE d.user_id = u AND d.platform = 'apns'
               AND (d.config ? 'live_activity_token' OR d.config ? 'live_activity_start_token')
        ), ranked AS (
            SELECT x.id, x.component_id, x.thread_id, x.title, x.body, x.sensitive,
                   row_number() OVER (ORDER BY x.id DESC) AS rn
              FROM decisions AS x
             WHERE x.user_id = u AND x.status = 'open'
        ), open_set AS (
            SELECT count(*) AS n,
                   coalesce(jsonb_agg(jsonb_build_object(
                       'decision_id', r.id, 'component_id', r.component_id,
                       'thread_id', r.thread_id, 'title', left(r.title, 60),
                       'question', left(r.body, 120), 'secret', r.sensitive)
                       ORDER BY r.id DESC) FILTER (WHERE r.rn <= 5), '[]'::jsonb) AS cards
              FROM ranked AS r
        ), plan AS (
            SELECT v.id AS device_id, o.n, o.cards,
                   CASE WHEN v.config ? 'live_activity_token'
                        THEN CASE WHEN o.n > 0 THEN 'update' ELSE 'end' END
                        WHEN o.n > 0 AND coalesce(
                             (v.config ->> 'live_activity_start_queued_at')::timestamptz
                             < clock_timestamp() - interval '10 minutes', true)
                        THEN 'start' END AS event,
                   coalesce(v.config ->> 'live_activity_token',
                            v.config ->> 'live_activity_start_token') AS token
              FROM devices AS v CROSS JOIN open_set AS o
        ), superseded AS (
            UPDATE push_outbox AS o
               SET status = 'dead',
                   last_error = 'superseded: a newer Live Activity state was queued'
              FROM plan AS p
             WHERE p.event IS NOT NULL AND o.user_id = u AND o.decision_id IS NULL
               AND o.device_id = p.device_id AND o.kind = 'activity' AND o.status = 'pending'
               AND o.payload ->> 'event' IN ('update', 'start')
            RETURNING o.id
        ), inserted AS (
            INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
            SELECT u, p.device_id, NULL, 'activity', 'live-activity', jsonb_build_object(
                       'v', 1, 'kind', 'live-activity', 'event', p.event, 'token', p.token,
                       'timestamp', floor(extract(epoch FROM clock_timestamp()))::bigint,
                       'open_count', p.n, 'cards', p.cards)
              FROM plan AS p
             WHERE p.event IS NOT NULL AND (SELECT count(*) FROM superseded) >= 0
            RETURNING device_id, payload ->> 'event' AS event
        ), marked AS (
            UPDATE push_devices AS d
               SET config = CASE WHEN i.event = 'end' THEN d.config - 'live_activity_token'
                                 ELSE d.config || jsonb_build_object(
                                      'live_activity_start_queued_at', clock_timestamp()) END
              FROM inserted AS i
             WHERE d.user_id = u AND d.id = i.device_id AND i.event IN ('end', 'start')
        )
        SELECT count(*) INTO queued_now FROM inserted;
        queued := queued + queued_now;
    END LOOP;
    IF queued > 0 AND coalesce(current_setting('maxclaw.notify', true), '') <> 'off' THEN
        PERFORM pg_notify('maxclaw_push', '');
    END IF;
    RETURN queued;
END $$;

CREATE FUNCTION maxclaw_refresh_live_activities(users uuid[]) RETURNS integer
    LANGUAGE plpgsql AS $$
DECLARE
    u uuid;
    shown uuid[] := '{}';
BEGIN
    IF cardinality(users) > 1 THEN
        users := ARRAY(SELECT DISTINCT w.user_id FROM unnest(users) AS w(user_id)
                        ORDER BY w.user_id);
    END IF;
    FOREACH u IN ARRAY coalesce(users, '{}')
    LOOP
        IF EXISTS (SELECT 1 FROM push_devices AS d
                    WHERE d.user_id = u AND d.platform = 'apns'
                      AND (d.config ? 'live_activity_token'
                           OR d.config ? 'live_activity_start_token')) THEN
            PERFORM pg_advisory_xact_lock(hashtext('maxclaw_live_activity:' || u::text));
            shown := shown || u;
        END IF;
    END LOOP;
    IF cardinality(shown) = 0 THEN
        RETURN 0;
    END IF;
    RETURN maxclaw_queue_live_activities(shown);
END $$;

-- A decision opened (inserted open) or changed status: refresh its users' Live Activities, once
-- per statement for every user it touched (the sweeps open and settle decisions by the batch).
CREATE FUNCTION maxclaw_decisions_live_activity() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    users uuid[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(DISTINCT n.user_id) INTO users FROM changed AS n WHERE n.status = 'open';
    ELSE
        SELECT array_agg(DISTINCT n.user_id) INTO users
          FROM changed AS n JOIN previous AS o ON o.user_id = n.user_id AND o.id = n.id
         WHERE o.status IS DISTINCT FROM n.status;
    END IF;
    IF users IS NOT NULL THEN
        PERFORM maxclaw_refresh_live_activities(users);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER decisions_live_activity_opened AFTER INSERT ON decisions
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION maxclaw_decisions_live_activity();
CREATE TRIGGER decisions_live_activity_moved AFTER UPDATE ON decisions
    REFERENCING OLD TABLE AS previous NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION maxclaw_decisions_live_activity();

-- Any new message of an archived thread brings it back to the thread list (0021_threads_search):
-- once per statement, for the threads it wrote to; a thread that is not archived is not written
-- (no new rev, no lock).
CREATE FUNCTION maxclaw_unarchive_threads() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE threads AS t SET archived_at = NULL
      FROM (SELECT DISTINCT a.user_id, a.thread_id FROM added AS a) AS w
     WHERE t.user_id = w.user_id AND t.id = w.thread_id AND t.archived_at IS NOT NULL;
    RETURN NULL;
END $$;
CREATE TRIGGER messages_unarchive AFTER INSERT ON messages
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION maxclaw_unarchive_threads();

-- Statistics on what search matches (0021_threads_search, 0024_search_stored): with them the
-- planner knows how many of a user's messages hold a word, and walks the newest messages
-- backwards for a common one (stopping at the ranked candidates) instead of rechecking every
-- match found through a GIN index (a word in nine messages of ten: 250 ms for 10,000 messages
-- without, 38 ms with), and reads a rare one through its index. The stored documents
-- (messages.search_fts, search_han) carry their own; the text the trigrams match has these. Both
-- from ten times the default sample: with the default a part of a word in 1.5% of the messages
-- was guessed from 0.02% to 2%, and the planner walked the newest messages for it.
CREATE STATISTICS messages_search_text_stats ON ("left"((COALESCE(body, ''::text) || ' '::text) || COALESCE(jsonb_path_query_array(tool_calls, 'strict $[*]?(@."name" == "ask_user_question")."arguments".**?(@.type() == "string")'::jsonpath)::text, ''::text), 20000)) FROM messages;
ALTER STATISTICS messages_search_text_stats SET STATISTICS 1000;
ALTER TABLE messages ALTER COLUMN search_fts SET STATISTICS 1000,
    ALTER COLUMN search_han SET STATISTICS 1000;
