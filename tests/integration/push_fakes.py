"""Local stand-ins for push receivers: a real HTTP server on 127.0.0.1 that records every
request and answers from a script (fail the first N, fail forever, or succeed)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from aiohttp import web


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int


@dataclass
class Endpoint:
    """``async with Endpoint(fail_first=3) as ep``: ``ep.url`` takes POSTs on any path."""

    fail_first: int = 0
    fail_status: int = 500
    fail_forever: bool = False
    hits: list[Hit] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> Endpoint:
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        failing = self.fail_forever or len(self.hits) < self.fail_first
        status = self.fail_status if failing else 201
        async with self._changed:
            self.hits.append(Hit(request.path, dict(request.headers), body, status))
            self._changed.notify_all()
        return web.Response(status=status, text="try later" if failing else "")

    def delivered(self) -> Counter[str]:
        """How many 2xx answers each idempotency key got."""
        return Counter(h.headers.get("Idempotency-Key", "") for h in self.hits
                       if 200 <= h.status < 300)

    async def wait_delivered(self, keys: int, timeout_s: float = 60.0) -> None:
        """Until ``keys`` distinct idempotency keys were answered 2xx."""
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self.delivered()) >= keys), timeout_s)

    async def wait_hits(self, count: int, timeout_s: float = 60.0) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.hits) >= count),
                                   timeout_s)


class ManualClock:
    """A clock the test moves; the dispatcher reads it for claims, leases and retries."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


async def insert_decision(conn: Any, user_id: str, thread_id: str, component_id: str, *,
                          options: list[dict[str, Any]] | None = None, allow_text: bool = False,
                          sensitive: bool = False, body: str = "Which one?") -> dict[str, Any]:
    """A decisions row as the decisions store writes it (for outbox tests without cards)."""
    row = await conn.fetchrow(
        """INSERT INTO decisions (user_id, kind, dedupe_key, component_id, thread_id, title,
                                  body, options, allow_text, sensitive)
           VALUES ($1, 'agent-question', $2, $3, $4, 'Card', $5, $6, $7, $8) RETURNING *""",
        user_id, f"ask:{component_id}", component_id, thread_id, body, options or [],
        allow_text, sensitive)
    out = dict(row)
    out["thread_id"] = str(out["thread_id"])
    return out


# -- APNs ----------------------------------------------------------------------------------

APNS_HOSTS = ("api.development.push.apple.com", "api.sandbox.push.apple.com",
              "api.push.apple.com")


def self_signed_tls(directory: Any) -> tuple[Any, Any]:
    """``(server_context, client_context)`` for a certificate naming Apple's APNs hosts,
    trusted only by the returned client context."""
    import ssl
    from datetime import UTC

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, APNS_HOSTS[0])])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in APNS_HOSTS]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path = directory / "apns-fake.pem"
    key_path = directory / "apns-fake.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_path, key_path)
    client = ssl.create_default_context(cafile=str(cert_path))
    return server, client


@dataclass
class ApnsRequestSeen:
    headers: dict[str, str]
    body: bytes


@dataclass
class ApnsFake:
    """A local APNs: TLS with a certificate for Apple's host names, HTTP/2 (``h2``) on
    127.0.0.1, recording the TLS server name each client asked for. ``answers`` maps a device
    token to ``(status, reason)``; other tokens get 200."""

    server_tls: Any
    answers: dict[str, tuple[int, str]] = field(default_factory=dict)
    requests: list[ApnsRequestSeen] = field(default_factory=list)
    server_names: list[str] = field(default_factory=list)
    port: int = 0
    _server: Any = None
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def __aenter__(self) -> ApnsFake:
        self.server_tls.sni_callback = (
            lambda _sock, name, _ctx: self.server_names.append(name))
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0,
                                                  ssl=self.server_tls)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def wait_requests(self, count: int, timeout_s: float = 30.0) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.requests) >= count),
                                   timeout_s)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from h2.config import H2Configuration
        from h2.connection import H2Connection
        from h2.events import DataReceived, RequestReceived, StreamEnded

        try:
            conn = H2Connection(H2Configuration(client_side=False, header_encoding="utf-8"))
            conn.initiate_connection()
            writer.write(conn.data_to_send())
            streams: dict[int, ApnsRequestSeen] = {}
            while data := await reader.read(65535):
                for event in conn.receive_data(data):
                    if isinstance(event, RequestReceived):
                        streams[event.stream_id] = ApnsRequestSeen(
                            {str(k): str(v) for k, v in event.headers or []}, b"")
                    elif isinstance(event, DataReceived):
                        streams[event.stream_id].body += event.data
                        conn.acknowledge_received_data(event.flow_controlled_length,
                                                       event.stream_id)
                    elif isinstance(event, StreamEnded):
                        await self._answer(conn, event.stream_id, streams.pop(event.stream_id))
                writer.write(conn.data_to_send())
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _answer(self, conn: Any, stream_id: int, seen: ApnsRequestSeen) -> None:
        token = seen.headers[":path"].rsplit("/", 1)[-1]
        status, reason = self.answers.get(token, (200, ""))
        headers = [(":status", str(status)), ("apns-id", seen.headers.get("apns-id", ""))]
        if status == 200:
            conn.send_headers(stream_id, headers, end_stream=True)
        else:
            conn.send_headers(stream_id, headers)
            conn.send_data(stream_id, json.dumps({"reason": reason}).encode(), end_stream=True)
        async with self._changed:
            self.requests.append(seen)
            self._changed.notify_all()
