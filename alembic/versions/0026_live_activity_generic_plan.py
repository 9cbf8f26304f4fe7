"""The Live Activity refresh keeps one plan per connection (issue 33, item 1).

``maxclaw_refresh_live_activities(users uuid[])`` runs in the statement of every decision that
opens or settles (the ``decisions_live_activity_*`` triggers): twice per round trip. Its first
query, ``d.user_id = ANY (users)``, was planned on every call: PL/pgSQL caches its statements'
plans with ``plan_cache_mode = auto``, and the custom plan, costed for the one-element array it
is always called with, came out cheaper than the generic one costed for ten elements, so the
plan cache kept planning. ``pg_stat_statements`` (``python -m bench.pgss``): 0.12-0.13 ms of
planning per call; the function's time per round trip 0.26 -> 0.11 ms with the generic plan.

The function now carries ``SET plan_cache_mode = force_generic_plan``: each of its statements
is planned once per connection. The generic plans read ``push_devices`` and ``decisions`` by
their user's key (tests/integration/test_query_plans.py checks them on a loaded database).
Nothing else changes; a previous release's code calls the function as before.

Revision ID: 0026_live_activity_generic_plan
Revises: 0025_component_message_keys
Create Date: 2026-12-06
"""

from alembic import op

revision = "0026_live_activity_generic_plan"
down_revision = "0025_component_message_keys"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER FUNCTION maxclaw_refresh_live_activities(uuid[])"
               " SET plan_cache_mode = force_generic_plan")


def downgrade() -> None:
    op.execute("ALTER FUNCTION maxclaw_refresh_live_activities(uuid[]) RESET plan_cache_mode")
