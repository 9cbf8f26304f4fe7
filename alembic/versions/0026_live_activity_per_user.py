"""The Live Activity refresh, one user at a time, keeps its generic plans (issue 33, item 1).

``maxclaw_refresh_live_activities(users uuid[])`` runs in the statement of every decision that
opens or settles (the ``decisions_live_activity_*`` triggers): twice per round trip. Its
statements named the users as an array (``d.user_id = ANY (users)``, and ``decisions`` through
a join to those devices). PL/pgSQL's plan cache (``plan_cache_mode = auto``) costed the
custom plan for the one-element array it is always called with below the generic one costed
for ten elements, so it planned again on every call: 0.12-0.13 ms per call in
``python -m bench.pgss``, invisible in its planning column because a nested statement plans
inside its caller's execution. Forcing the generic plan on the old text (a first 0026, never
released) halved the function's time, but on a schema partitioned by user that plan read
every ``decisions`` partition: neither an array parameter nor a join can prune partitions.

Now the function checks each user of the array for a Live Activity device and takes his lock
(in user order, as before), then refreshes one user at a time with every statement naming
him (``= u``), and carries ``SET plan_cache_mode = force_generic_plan``: each statement is
planned once per connection, and its generic plan prunes to the user's partition when the
executor starts. It queues the same rows as before (tests/integration/test_push_apns.py);
tests/integration/test_query_plans.py EXPLAINs the generic plans on a loaded database, plain
and partitioned.

A catalog change only: the function is replaced in place, with its signature; a replica of the
previous release calls it as before. The downgrade leaves this body: it computes what 0018's
did, and putting back the old text would only bring back its planning.

Revision ID: 0026_live_activity_per_user
Revises: 0025_component_message_keys
Create Date: 2026-12-07
"""

from alembic import op

revision = "0026_live_activity_per_user"
down_revision = "0025_component_message_keys"
branch_labels = None
depends_on = None

# live.sql as of this revision (a migration never imports the moving schema)
FUNCTION = """
CREATE OR REPLACE FUNCTION maxclaw_refresh_live_activities(users uuid[])
    RETURNS integer LANGUAGE plpgsql
    SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    u uuid;
    shown uuid[] := '{}';
    queued integer := 0;
    queued_now integer;
BEGIN
    FOR u IN SELECT DISTINCT w.user_id FROM unnest(users) AS w(user_id) ORDER BY w.user_id
    LOOP
        IF EXISTS (SELECT 1 FROM push_devices AS d
                    WHERE d.user_id = u AND d.platform = 'apns'
                      AND (d.config ? 'live_activity_token'
                           OR d.config ? 'live_activity_start_token')) THEN
            PERFORM pg_advisory_xact_lock(hashtext('maxclaw_live_activity:' || u::text));
            shown := shown || u;
        END IF;
    END LOOP;
    FOREACH u IN ARRAY shown
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


def upgrade() -> None:
    op.execute(FUNCTION)


def downgrade() -> None:
    """Nothing to undo that a previous release would notice (the module's doc)."""
