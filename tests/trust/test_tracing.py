"""Opt-in OpenTelemetry tracing (issue 34, "Tracing"): off by default; on, the HTTP routes,
asyncpg's queries and the push dispatcher's deliveries make spans, and no span holds a token
or a query's parameters. An in-memory exporter stands in for the collector."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from maxclaw import tracing
from maxclaw.app import create_app
from tests.cards import CHOICE, new_thread, post_card
from tests.conftest import Harness, app_settings


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    tracing.enable(provider)
    try:
        yield spans
    finally:
        tracing.disable()


@asynccontextmanager
async def traced_app(database_url: str, **overrides: Any) -> AsyncIterator[Harness]:
    app = create_app(app_settings(database_url, **overrides))
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        yield Harness(app=app, services=app.state.services, client=client)
        await client.aclose()
        await app.state.services.push.dispatcher.close()


async def test_tracing_is_off_by_default(harness: Harness) -> None:
    assert harness.services.settings.tracing is False
    assert tracing._provider is None
    assert not any(m.cls is tracing.HttpTracing for m in harness.app.user_middleware)


async def test_routes_queries_and_deliveries_make_spans(
        database_url: str, exporter: InMemorySpanExporter) -> None:
    async with traced_app(database_url, tracing=True) as h:
        a = await h.actor("max")
        device = await a.user.post("/v1/push/devices", json={"platform": "log"})
        assert device.status_code == 201, device.text
        tid = await new_thread(a.user)
        await post_card(a.agent, tid, CHOICE)
        assert await h.services.push.dispatcher.run_until_idle() >= 1
        assert (await a.user.get("/v1/threads")).status_code == 200
    spans = exporter.get_finished_spans()
    server = [s for s in spans if s.kind == SpanKind.SERVER]
    assert any(s.name.startswith("GET") for s in server), [s.name for s in spans]
    assert any(s.name.startswith("POST") for s in server)
    queries = [s for s in spans if (s.attributes or {}).get("db.system") == "postgresql"
               or (s.attributes or {}).get("db.system.name") == "postgresql"]
    assert queries, [s.name for s in spans]
    delivered = [s for s in spans if s.name == "push.deliver"]
    assert delivered and delivered[0].attributes["platform"] == "log"
    # nothing a span carries holds a token
    everything = repr([(s.name, dict(s.attributes or {})) for s in spans])
    assert a.user_token not in everything and a.agent_token not in everything
