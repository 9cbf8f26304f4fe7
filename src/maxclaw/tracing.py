"""Opt-in OpenTelemetry traces (``MAXCLAW_TRACING=true``): the HTTP routes, asyncpg's queries
and the push dispatcher's deliveries.

Off by default, and then nothing of OpenTelemetry is imported. On, spans go over OTLP/HTTP to
``OTEL_EXPORTER_OTLP_ENDPOINT`` (the SDK's own ``OTEL_*`` variables configure the exporter),
unless ``enable`` is handed a provider (the tests hand an in-memory one). What spans hold is
kept free of secrets: SQL text without its parameters (asyncpg's instrumentation captures none
by default), HTTP routes without headers, and no WebSocket at all (its ticket travels in the
query string).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

_provider: Any = None  # the TracerProvider while tracing is on


def enable(provider: Any = None) -> None:
    """Turn tracing on for this process (idempotent): asyncpg instrumented, the provider kept
    for the HTTP middleware and ``span``."""
    global _provider
    if _provider is not None:
        return
    from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor

    if provider is None:
        provider = _otlp_provider()
    AsyncPGInstrumentor().instrument(tracer_provider=provider)  # type: ignore[no-untyped-call]
    _provider = provider


def disable() -> None:
    """Turn tracing off again (asyncpg un-instrumented)."""
    global _provider
    if _provider is None:
        return
    from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor

    AsyncPGInstrumentor().uninstrument()  # type: ignore[no-untyped-call]
    _provider = None


def _otlp_provider() -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "maxclaw"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


@contextlib.contextmanager
def span(name: str, **attributes: str | int) -> Iterator[None]:
    """A span around a block while tracing is on; nothing at all while it is off."""
    if _provider is None:
        yield
        return
    with _provider.get_tracer("maxclaw").start_as_current_span(name, attributes=attributes):
        yield


class HttpTracing:
    """OpenTelemetry's ASGI middleware for HTTP requests (WebSockets pass untraced)."""

    def __init__(self, app: ASGIApp) -> None:
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

        self.app = app
        self.traced = OpenTelemetryMiddleware(app, tracer_provider=_provider)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _provider is not None:
            await self.traced(scope, receive, send)
        else:
            await self.app(scope, receive, send)
