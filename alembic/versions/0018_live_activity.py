"""The Live Activity shows every open decision: ``activity`` outbox rows and their triggers.

``push_outbox.kind`` takes ``activity`` (one row per APNs device with a Live Activity or
push-to-start token, carrying the whole state to show); ``maxclaw_refresh_live_activities``
queues them, called by statement triggers on ``decisions`` in the transaction that opens or
settles a decision (docs/rich-message.md, "Live Activity").

Revision ID: 0018_live_activity
Revises: 0017_signin_codes
Create Date: 2026-12-04
"""

from alembic import op

revision = "0018_live_activity"
down_revision = "0017_signin_codes"
branch_labels = None
depends_on = None

# live.sql as of this revision (a migration never imports the moving schema)
FUNCTIONS = """
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
CREATE FUNCTION maxclaw_refresh_live_activities(users uuid[]) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    u uuid;
    queued integer;
BEGIN
    FOR u IN SELECT DISTINCT d.user_id FROM push_devices AS d
              WHERE d.user_id = ANY (users) AND d.platform = 'apns'
                AND (d.config ? 'live_activity_token' OR d.config ? 'live_activity_start_token')
              ORDER BY d.user_id
    LOOP
        PERFORM pg_advisory_xact_lock(hashtext('maxclaw_live_activity:' || u::text));
    END LOOP;
    IF u IS NULL THEN
        RETURN 0;
    END IF;
    WITH devices AS (
        SELECT d.user_id, d.id, d.config FROM push_devices AS d
         WHERE d.user_id = ANY (users) AND d.platform = 'apns'
           AND (d.config ? 'live_activity_token' OR d.config ? 'live_activity_start_token')
    ), ranked AS (
        SELECT x.user_id, x.id, x.component_id, x.thread_id, x.title, x.body, x.sensitive,
               row_number() OVER (PARTITION BY x.user_id ORDER BY x.id DESC) AS rn
          FROM decisions AS x
         WHERE x.user_id IN (SELECT v.user_id FROM devices AS v) AND x.status = 'open'
    ), open_set AS (
        SELECT r.user_id, count(*) AS n,
               coalesce(jsonb_agg(jsonb_build_object(
                   'decision_id', r.id, 'component_id', r.component_id,
                   'thread_id', r.thread_id, 'title', left(r.title, 60),
                   'question', left(r.body, 120), 'secret', r.sensitive)
                   ORDER BY r.id DESC) FILTER (WHERE r.rn <= 5), '[]'::jsonb) AS cards
          FROM ranked AS r GROUP BY r.user_id
    ), plan AS (
        SELECT v.user_id, v.id AS device_id, coalesce(o.n, 0) AS n,
               coalesce(o.cards, '[]'::jsonb) AS cards,
               CASE WHEN v.config ? 'live_activity_token'
                    THEN CASE WHEN coalesce(o.n, 0) > 0 THEN 'update' ELSE 'end' END
                    WHEN coalesce(o.n, 0) > 0 AND coalesce(
                         (v.config ->> 'live_activity_start_queued_at')::timestamptz
                         < clock_timestamp() - interval '10 minutes', true)
                    THEN 'start' END AS event,
               coalesce(v.config ->> 'live_activity_token',
                        v.config ->> 'live_activity_start_token') AS token
          FROM devices AS v LEFT JOIN open_set AS o ON o.user_id = v.user_id
    ), superseded AS (
        UPDATE push_outbox AS o
           SET status = 'dead', last_error = 'superseded: a newer Live Activity state was queued'
          FROM plan AS p
         WHERE p.event IS NOT NULL AND o.user_id = p.user_id AND o.decision_id IS NULL
           AND o.device_id = p.device_id AND o.kind = 'activity' AND o.status = 'pending'
           AND o.payload ->> 'event' IN ('update', 'start')
        RETURNING o.id
    ), inserted AS (
        INSERT INTO push_outbox (user_id, device_id, decision_id, kind, collapse_id, payload)
        SELECT p.user_id, p.device_id, NULL, 'activity', 'live-activity', jsonb_build_object(
                   'v', 1, 'kind', 'live-activity', 'event', p.event, 'token', p.token,
                   'timestamp', floor(extract(epoch FROM clock_timestamp()))::bigint,
                   'open_count', p.n, 'cards', p.cards)
          FROM plan AS p
         WHERE p.event IS NOT NULL AND (SELECT count(*) FROM superseded) >= 0
        RETURNING user_id, device_id, payload ->> 'event' AS event
    ), marked AS (
        UPDATE push_devices AS d
           SET config = CASE WHEN i.event = 'end' THEN d.config - 'live_activity_token'
                             ELSE d.config || jsonb_build_object(
                                  'live_activity_start_queued_at', clock_timestamp()) END
          FROM inserted AS i
         WHERE d.user_id = i.user_id AND d.id = i.device_id AND i.event IN ('end', 'start')
    )
    SELECT count(*) INTO queued FROM inserted;
    IF queued > 0 AND coalesce(current_setting('maxclaw.notify', true), '') <> 'off' THEN
        PERFORM pg_notify('maxclaw_push', '');
    END IF;
    RETURN queued;
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
"""


def upgrade() -> None:
    op.execute("ALTER TABLE push_outbox DROP CONSTRAINT push_outbox_kind_check")
    op.execute("ALTER TABLE push_outbox ADD CONSTRAINT push_outbox_kind_check"
               " CHECK (kind IN ('notify', 'withdraw', 'activity'))")
    op.execute(FUNCTIONS)


def downgrade() -> None:
    op.execute("DROP TRIGGER decisions_live_activity_moved ON decisions")
    op.execute("DROP TRIGGER decisions_live_activity_opened ON decisions")
    op.execute("DROP FUNCTION maxclaw_decisions_live_activity()")
    op.execute("DROP FUNCTION maxclaw_refresh_live_activities(uuid[])")
    op.execute("DELETE FROM push_outbox WHERE kind = 'activity'")
    op.execute("ALTER TABLE push_outbox DROP CONSTRAINT push_outbox_kind_check")
    op.execute("ALTER TABLE push_outbox ADD CONSTRAINT push_outbox_kind_check"
               " CHECK (kind IN ('notify', 'withdraw'))")
