"""Settings, read once from the environment (prefix ``MAXCLAW_``) and passed down."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# each secret setting X may instead be read from the file MAXCLAW_X_FILE names (a Kubernetes or
# Docker secret mounted as a file); the variable itself wins when both are set. The keyring has
# its own MAXCLAW_SECRET_KEY_FILE (several keys, one a line: maxclaw.secrets.keyring).
SECRET_FILES = ("database_url", "listen_database_url", "migrate_database_url",
                "app_role_password", "vapid_private_key", "metrics_token")


def default_data_dir() -> Path:
    """The platform's user data directory for MaxClaw (the embedded database lives here)."""
    return Path(platformdirs.user_data_dir("maxclaw", appauthor=False))


class Settings(BaseSettings):
    """Every knob of the service. Built once (``Settings()``) and handed to ``create_app``."""

    model_config = SettingsConfigDict(env_prefix="MAXCLAW_", extra="ignore")

    database_url: str | None = None
    # A direct connection (not through a pooler) for LISTEN and for migrations' session lock;
    # default: database_url. Set it when database_url points at PgBouncer in transaction mode.
    listen_database_url: str | None = None
    # Where migrations and the other schema changes (`maxclaw migrate`, `db partition`,
    # `restore-finish`, and `serve`'s start-up migration) connect: the schema's owner, direct
    # (not through a pooler). Default: listen_database_url, else database_url. Set it when
    # database_url is a role without DDL rights (docs/operations.md, "Database roles").
    migrate_database_url: str | None = None
    # `maxclaw migrate` then grants this role data rights only (created if missing, with this
    # password when given): what `maxclaw db grant-app-role` does alone
    app_role: str | None = None
    app_role_password: str | None = Field(default=None, repr=False)
    # "pgbouncer": the pool's connections keep no prepared statements across transactions
    # (asyncpg's statement cache off), as PgBouncer's transaction mode requires
    db_pooler: Literal["none", "pgbouncer"] = "none"
    data_dir: Path = Field(default_factory=default_data_dir)
    host: str = "127.0.0.1"
    port: int = 8765
    # `serve` behind a reverse proxy: the proxy's addresses (comma-separated IPs or CIDRs) whose
    # X-Forwarded-For and X-Forwarded-Proto are believed, so per-address quotas count the real
    # clients. Empty (the default): no header is believed, the peer is the client.
    forwarded_allow_ips: str = ""
    # /metrics: on its own port (bound to `host`) when set, and then not on the API port; on
    # the API port it answers only `Authorization: Bearer <metrics_token>` when that is set
    metrics_port: int | None = None
    metrics_token: str | None = Field(default=None, repr=False)
    # opt-in OpenTelemetry traces (HTTP routes, asyncpg, the push dispatcher), exported over
    # OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT (the SDK's own variables configure the rest)
    tracing: bool = False
    log_level: str = "INFO"
    log_json: bool | None = None  # None: JSON when stderr is not a terminal
    log_library_level: str = "WARNING"  # the libraries' loggers (apscheduler, aiohttp, …)

    db_pool_min: int = 2
    db_pool_max: int = 20
    db_command_timeout_s: float = 10.0
    # Send the live-update hints (NOTIFY) after each commit instead of inside it: for a database
    # whose disk flushes slowly (milliseconds: network storage), where notifying commits would
    # be flushed one at a time for every user; it costs two round trips per write on a fast
    # disk (docs/operations.md, "Hints after the commit")
    hints_after_commit: bool = False

    # background jobs inside `serve`; tests switch them off to drive them by hand
    run_sweeper: bool = True
    sweep_interval_s: float = 60.0
    sweep_batch: int = 500
    run_push_dispatcher: bool = True
    run_listener: bool = True
    realtime_poll_s: float = 0.5

    presence_ttl_s: float = 90.0
    turn_lease_s: float = 60.0
    # a runtime lease (POST /v1/agent/leases) lasts this long past its last heartbeat; the
    # lapse tick (turn leases and runtime leases) runs every lapse_interval_s
    runtime_lease_s: float = Field(default=60.0, gt=0, le=3600)
    lapse_interval_s: float = Field(default=5.0, gt=0, le=600)
    # the model window a claim hands over and each history page holds: the newest rows up to
    # these caps (whole tool-call groups); older rows are read with next_before_id
    model_window_rows: int = Field(default=500, ge=1)
    model_window_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    # how long after answering Max may take an answer back (if no model has seen it yet);
    # MAXCLAW_RETRACT_WINDOW_MINUTES
    retract_window_minutes: float = Field(default=10.0, ge=0)
    # Main's time to decide a card handed to it, for users who set none (their own:
    # main_timeout_minutes in /v1/settings); then the sweep hands it back to Max with the note
    # "Main did not decide". MAXCLAW_MAIN_TIMEOUT_MINUTES
    main_timeout_minutes: int = Field(default=30, ge=1, le=10080)
    # Main's read_thread: at most these rows and bytes of the asking thread per call
    main_read_rows: int = Field(default=50, ge=1, le=500)
    main_read_bytes: int = Field(default=64 * 1024, ge=4096, le=1024 * 1024)
    # realtime: a catch-up page and a hub batch read at most this many bytes of rows (always
    # at least one row), so one user's 1 MiB rows never make one read hold the event loop
    realtime_batch_bytes: int = Field(default=1024 * 1024, ge=1024)

    # push
    push_allow_private_urls: bool = False
    push_log_payloads: bool = True
    push_max_attempts: int = 8
    push_backoff_base_s: float = 2.0
    push_backoff_max_s: float = 600.0
    push_lease_s: float = 10.0  # a dead dispatcher's rows are claimed again after this
    push_concurrency: int = 48  # deliveries in flight per dispatcher (the HTTP pool holds 50)
    push_endpoint_concurrency: int = 16  # of which to one host
    vapid_private_key: str | None = None  # PEM or base64url raw key
    vapid_subject: str = "mailto:ops@maxclaw.invalid"
    apns_key_path: Path | None = None
    apns_key_id: str | None = None
    apns_team_id: str | None = None

    # `/mcp`: import the MCP SDK when `serve` starts (in the background, off the event loop),
    # or only at the first /mcp request. The import costs ~0.35 s of CPU and ~16 MB per
    # process; a replica whose agents use REST or `maxclaw mcp` (stdio) never needs it, and the
    # first /mcp request of a lazy one waits for the import once (docs/operations.md)
    mcp_preload: bool = True

    max_body_bytes: int = 1024 * 1024
    # `serve`: a request's headers must arrive within this (slowloris; headertimeout.py)
    header_timeout_s: float = 10.0

    # quotas (docs/security.md): over one answers 429 rate_limited with Retry-After
    # the `log` push adapter (payloads in the server's log) is for development: off by default
    push_allow_log_devices: bool = False
    quota_devices_per_user: int = 20
    quota_sockets_per_user: int = 50  # open WebSockets per user, per replica
    quota_claims_per_token: int = 4  # concurrent turn claims (long polls) per agent token
    quota_failed_auth_per_minute: int = 30  # refused tokens per client address, per replica
    quota_pushes_per_user_per_minute: int = 120  # deliveries per user, per dispatcher

    # secrets at rest (maxclaw.secrets): the key(s), else MAXCLAW_SECRET_KEY_FILE, else
    # <data_dir>/secret.key (created on the embedded database's first start)
    secret_key: str | None = Field(default=None, repr=False)
    secret_key_file: Path | None = None
    secret_ttl: str = "7d"  # seconds, or 30m / 12h / 7d

    # retention (`maxclaw prune`, and a round every prune_interval_s inside `serve`):
    # days each kind of row is kept; 0 keeps it forever (docs/operations.md)
    run_pruner: bool = True
    prune_interval_s: float = 3600.0
    prune_batch: int = 5000
    retention_outbox_sent_days: float = 7.0
    retention_outbox_dead_days: float = 30.0
    retention_audit_days: float = 180.0
    retention_turns_days: float = 30.0
    retention_presence_days: float = 1.0
    retention_ws_tickets_days: float = 1.0
    retention_runtime_leases_days: float = 7.0  # lapsed runtime leases (their jobs are gone)
    # /metrics reads the database gauges (sweep lag, outbox backlog, …) at most this often
    metrics_db_refresh_s: float = 5.0
    # the hot routes served by api/lean.py (false: every request through FastAPI's routers;
    # bench.ab_http compares the two)
    lean_routes: bool = True

    database_url_file: Path | None = None
    listen_database_url_file: Path | None = None
    migrate_database_url_file: Path | None = None
    app_role_password_file: Path | None = None
    vapid_private_key_file: Path | None = None
    metrics_token_file: Path | None = None

    @model_validator(mode="after")
    def _read_secret_files(self) -> Settings:
        """Fill each secret from its ``*_file`` when the variable itself is not set."""
        for name in SECRET_FILES:
            path: Path | None = getattr(self, f"{name}_file")
            if path is None or getattr(self, name) is not None:
                continue
            try:
                value = path.read_text().strip()
            except OSError as exc:
                raise ValueError(f"MAXCLAW_{name.upper()}_FILE: cannot read {path}: "
                                 f"{exc.strerror}; mount the secret there or unset it") from None
            if value:  # an empty file (an optional secret left blank) sets nothing
                setattr(self, name, value)
        return self
