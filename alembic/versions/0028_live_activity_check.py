"""The Live Activity check without a function-level setting, and one user read without a query.

``maxclaw_refresh_live_activities(users uuid[])`` runs in the statement of every decision that
opens or settles (the ``decisions_live_activity_*`` triggers): twice per round trip, and for
nearly every user there is nothing to do (no APNs device with a Live Activity). Since 0026 the
whole function carried ``SET plan_cache_mode = force_generic_plan``; PostgreSQL saves, sets and
restores a function's settings on every call (``fmgr_security_definer``), and with the query
that sorted the array into the lock order that was 3% of PostgreSQL's CPU in the round trip at
16 clients (``python -m bench.profile postgres``; docs/benchmarks.md, issue 33 item 1).

Now the function is split: ``maxclaw_refresh_live_activities`` checks each user for a Live
Activity device and takes his lock (in user order; an array of one user, the round trip's case,
is read without a query), with no setting (its one query, by ``u``, keeps a generic plan in
``auto`` mode anyway); only when a user has one does it call the new
``maxclaw_queue_live_activities(users)``, the unchanged queueing half, which keeps
``force_generic_plan`` (its statements must keep their generic, pruned plans: 0026). Same rows
queued (tests/integration/test_push_apns.py); a catalog change only, the signature kept.

Revision ID: 0028_live_activity_check
Revises: 0027_messages_derived
Create Date: 2026-12-07
"""

from alembic import op

from maxclaw.db.migrate import earlier_migration

revision = "0028_live_activity_check"
down_revision = "0027_messages_derived"
branch_labels = None
depends_on = None

# live.sql as of this revision (a migration never imports the moving schema)
QUEUE = """
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
"""

CHECK = """
ALTER FUNCTION maxclaw_refresh_live_activities(uuid[]) RESET ALL;
CREATE OR REPLACE FUNCTION maxclaw_refresh_live_activities(users uuid[]) RETURNS integer
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
"""


def upgrade() -> None:
    op.execute(QUEUE)
    op.execute(CHECK)


def downgrade() -> None:
    # 0026's function, as its own script froze it
    op.execute(earlier_migration("0026_live_activity_per_user").FUNCTION)
    op.execute("DROP FUNCTION maxclaw_queue_live_activities(uuid[])")
