"""Finding 10 (part): ``/metrics`` is not public on the API port.

Its per-route counters reveal other tenants' activity. Before, anyone who reached the API port
read it. Now: on the API port it answers loopback peers (a Prometheus on the same host, the
tests) or, when ``MAXCLAW_METRICS_TOKEN`` is set, only that bearer token; with
``MAXCLAW_METRICS_PORT`` it is served on its own port and not on the API port at all.
"""

from __future__ import annotations

import httpx

from tests.conftest import Harness, free_port
from tests.realtime_support import live_server
from tests.trust.test_quotas import harness_with

TOKEN = "metrics-scraper-0d9c"


def from_address(h: Harness, address: str, token: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=h.app, client=(address, 5000)),
                             base_url="http://test", headers=headers)


async def test_metrics_are_refused_to_a_remote_client_by_default(harness: Harness) -> None:
    async with from_address(harness, "203.0.113.20") as remote:
        resp = await remote.get("/metrics")
    # before: 200 and every route's counters
    assert resp.status_code == 403, resp.text
    assert "MAXCLAW_METRICS_TOKEN" in resp.json()["message"]
    assert "maxclaw_http" not in resp.text
    async with from_address(harness, "127.0.0.1") as local:
        assert (await local.get("/metrics")).status_code == 200


async def test_a_metrics_token_is_required_when_set(database_url: str) -> None:
    async with harness_with(database_url, metrics_token=TOKEN) as h:
        async with from_address(h, "127.0.0.1") as local:
            refused = await local.get("/metrics")
        assert refused.status_code == 401, refused.text
        async with from_address(h, "203.0.113.20", "wrong") as wrong:
            assert (await wrong.get("/metrics")).status_code == 401
        async with from_address(h, "203.0.113.20", TOKEN) as scraper:
            served = await scraper.get("/metrics")
        assert served.status_code == 200 and "maxclaw_" in served.text


async def test_a_metrics_port_serves_them_apart(database_url: str) -> None:
    port = free_port()
    async with live_server(database_url, metrics_port=port) as live, \
            httpx.AsyncClient(timeout=10) as http:
        api = await http.get(f"{live.base_url}/metrics")
        apart = await http.get(f"http://127.0.0.1:{port}/metrics")
        other = await http.get(f"http://127.0.0.1:{port}/v1/threads")
    assert api.status_code == 404, api.text
    assert apart.status_code == 200 and "maxclaw_" in apart.text
    assert other.status_code == 404
