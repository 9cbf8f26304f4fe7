"""The declared layer of every module of ``maxclaw``: the package map that
``tests/unit/test_architecture.py`` enforces.

A table here rather than a marker in each module: the whole map reads in one place (the
picture docs/architecture.md draws), a module carries no test metadata, and a new module, a
move or a change of layer is one reviewed line of this file. A module missing here fails the
test; so does a line for a module that no longer exists.

Server layers, lowest first; a module imports only its own layer and the ones below:

    foundation  errors, clock, settings, the pool and schema (db), card definitions (cards)
    model       typed rows and pure domain rules (no I/O): the transitions table, payloads
    store       SQL only
    adapter     the other I/O: the push services' HTTP clients (beside store, same rank)
    service     rules and transactions; sweepers, listeners, workers, ops procedures
    surface     settling a card from outside (panel, push action, webhook reply): above
                components, decisions and push, calling down (issue 27, item 3)
    api         HTTP, WebSocket and MCP endpoints, thin; the WebUI's assets
    launcher    assembles or starts the process: may import anything

Two sides apart from the layers: ``client`` (the agent runtime, the CLI's client half) imports
only itself and ``wire``; ``wire`` (the models both sides speak) imports only itself.
"""

from __future__ import annotations

SERVER_RANKS = {"foundation": 0, "model": 1, "store": 2, "adapter": 2, "service": 3,
                "surface": 4, "api": 5, "launcher": 6}
SIDES = {"client", "wire"}


def _each(layer: str, *modules: str) -> dict[str, str]:
    return {f"maxclaw.{m}" if m else "maxclaw": layer for m in modules}


LAYERS: dict[str, str] = {
    **_each("launcher", "app", "cli", "composition", "devserver", "secrets.cli"),
    # "": the root package, which holds only the version
    **_each("foundation", "", "clock", "errors", "jsonlimits", "logs", "metrics", "quotas",
            "settings", "timefmt", "headertimeout", "jobs", "tracing",
            "db", "db.constraints", "db.database", "db.embedded", "db.listen",
            "db.migrate", "db.roles",
            "db.rows", "db.schema", "db.search_sql", "db.urls",
            "cards", "cards.answers", "cards.definitions", "cards.rules", "cards.text"),
    **_each("wire", "wire", "wire.mcp", "wire.models"),
    **_each("client", "client", "client.commands", "client.demo", "client.http",
            "client.mcp_hook", "client.bridge", "hook", "client.mcp_stdio", "client.scenario",
            "client.runtime",
            "client.runtime.loop", "client.runtime.model", "client.runtime.openai_model",
            "client.runtime.prompt", "client.runtime.scripted",
            "client.runtime.workspace_tools"),
    # one package after another: model, store, service, api
    **_each("model", "agentthreads", "agentthreads.rows"),
    **_each("store", "agentthreads.store"),
    **_each("service", "agentthreads.service"),

    **_each("model", "auth", "auth.rows"),
    **_each("store", "auth.store"),
    **_each("service", "auth.service", "auth.revocations"),

    **_each("model", "components", "components.machine", "components.rows",
            "components.projections"),
    **_each("store", "components.store", "components.post_store", "components.sweep_store",
            "components.tool_store", "components.main_store", "components.retract_store"),
    # effects.py: one function per consequence; the others move cards and call it
    **_each("service", "components.service", "components.server_tools", "components.sweeper",
            "components.effects", "components.moves", "components.answers",
            "components.posting", "components.handoff", "components.withdraw",
            "components.retract",
            "components.sweeps", "components.main_tools"),

    **_each("model", "decisions", "decisions.rows", "decisions.projections"),
    **_each("store", "decisions.store"),
    **_each("service", "decisions.service", "decisions.carriers"),

    **_each("api", "mcp", "mcp.backend", "mcp.streamable"),

    **_each("model", "ops"),
    **_each("service", "ops.gauges", "ops.partition", "ops.restore", "ops.retention",
            "ops.schema_check", "ops.services"),
    # /metrics on its own port: an HTTP endpoint like the API's
    **_each("api", "ops.metrics_http"),

    # a person's settings (issue 29): quiet-hours arithmetic and the push catalogue are pure
    **_each("model", "prefs", "prefs.quiet", "prefs.catalogue", "prefs.rows", "prefs.due"),
    **_each("store", "prefs.store"),

    **_each("model", "presence"),
    **_each("store", "presence.store"),
    **_each("service", "presence.service"),

    **_each("model", "push", "push.rows", "push.payload", "push.addresses", "push.shaping",
            "push.adapters", "push.adapters.base"),
    **_each("store", "push.store", "push.action_token_store", "push.sample_notification"),
    **_each("adapter", "push.adapters.apns", "push.adapters.http", "push.adapters.log",
            "push.adapters.resolver",
            "push.adapters.webhook", "push.adapters.webpush"),
    **_each("service", "push.service", "push.action_tokens", "push.dispatcher", "push.outbox",
            "push.worker", "push.devices"),
    # settling a card from outside: above components, decisions and push, calling down
    **_each("surface", "surfaces", "surfaces.panel", "surfaces.push_actions",
            "surfaces.settings"),

    **_each("model", "realtime", "realtime.cursor", "realtime.sendqueue", "realtime.logfilter"),
    **_each("store", "realtime.store"),
    **_each("service", "realtime.frames", "realtime.hub"),
    **_each("api", "realtime.connection"),

    **_each("model", "secrets", "secrets.crypto", "secrets.keyring", "secrets.mask",
            "secrets.rows", "secrets.sealed"),
    **_each("store", "secrets.store"),
    **_each("service", "secrets.service", "secrets.rotation", "secrets.sweeper"),

    **_each("model", "housekeeping", "housekeeping.rows"),
    **_each("store", "housekeeping.store"),
    **_each("service", "housekeeping.threads", "housekeeping.users"),

    **_each("model", "search"),
    **_each("store", "search.store"),
    **_each("service", "search.service"),

    **_each("model", "timeline", "timeline.rows", "timeline.projections", "timeline.groups"),
    **_each("store", "timeline.store"),
    **_each("service", "timeline.service"),

    **_each("model", "leases", "leases.rows"),
    **_each("store", "leases.store"),
    **_each("service", "leases.service"),

    **_each("model", "turns", "turns.rows", "turns.guard", "turns.history",
            "turns.background"),
    **_each("store", "turns.store"),
    **_each("service", "turns.service", "turns.lapse", "turns.listener", "turns.messages"),

    **_each("api", "api", "api.deps", "api.encode", "api.errors", "api.lean", "api.middleware",
            "api.requestid", "api.responses", "api.routes", "api.routes.agent",
            "api.routes.agent_threads",
            "api.routes.agent_turns", "api.routes.agent_leases", "api.routes.cards",
            "api.routes.components",
            "api.routes.decisions", "api.routes.health", "api.routes.push",
            "api.routes.settings", "api.routes.threads", "api.routes.tokens",
            "api.routes.web", "api.routes.ws", "api.routes.turn_stop",
            "web", "web.apidocs", "web.assets", "web.qr"),
}
