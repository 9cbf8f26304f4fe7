"""Finding 1: webhook SSRF by DNS rebinding.

A fake ``getaddrinfo`` (installed on the running loop, where both the old guard and aiohttp's
default resolver asked) answers differently on each lookup. The receiver is a real HTTP server
on 127.0.0.1: a request reaching it is the SSRF.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from maxclaw.app import create_app
from maxclaw.push.adapters.base import DeliveryError
from maxclaw.push.adapters.http import HttpSender
from maxclaw.push.addresses import is_private_ip
from tests.conftest import Harness, app_settings
from tests.integration.push_fakes import Endpoint

PUBLIC = "93.184.216.34"  # globally routable; nothing in this sandbox answers there
SECRET = "s" * 32


def info(address: str, port: int) -> list[Any]:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sockaddr: tuple[Any, ...] = (address, port, 0, 0) if ":" in address else (address, port)
    return [(family, socket.SOCK_STREAM, 6, "", sockaddr)]


def fake_dns(monkeypatch: pytest.MonkeyPatch, answers: list[str | None]) -> list[str]:
    """Answer the n-th lookup of ``rebind.test`` with ``answers[n]`` (the last one repeats;
    None fails the lookup). Returns the log of names looked up."""
    loop = asyncio.get_running_loop()
    real: Callable[..., Any] = loop.getaddrinfo
    asked: list[str] = []

    async def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if host != "rebind.test":
            return list(await real(host, port, *args, **kwargs))
        answer = answers[min(len(asked), len(answers) - 1)]
        asked.append(host)
        if answer is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return info(answer, int(port or 0))

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    return asked


@pytest.mark.parametrize("answers", [[PUBLIC, "127.0.0.1"], [None, "127.0.0.1"]],
                         ids=["public-then-loopback", "fail-then-loopback"])
async def test_a_rebinding_name_never_reaches_the_local_receiver(
        monkeypatch: pytest.MonkeyPatch, answers: list[str | None]) -> None:
    async with Endpoint() as endpoint:
        asked = fake_dns(monkeypatch, answers)
        sender = HttpSender(timeout_s=1.5, allow_private=False)
        sender.allowed_ports = frozenset({80, 443, endpoint.port})  # the receiver's port
        try:
            with pytest.raises(DeliveryError) as caught:
                await sender.post(f"http://rebind.test:{endpoint.port}/hook", content=b"{}",
                                  headers={}, what="webhook")
        finally:
            await sender.close()
    assert endpoint.hits == []  # before: the signed POST landed on 127.0.0.1
    assert asked == ["rebind.test"]  # resolved once; the connect used that answer
    if answers[0] is None:
        assert caught.value.message.startswith("refused: rebind.test did not resolve")
        assert caught.value.retryable  # nothing was sent; a later attempt checks again


async def test_every_address_of_a_name_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()

    async def two(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        return info(PUBLIC, int(port or 0)) + info("10.0.0.7", int(port or 0))

    monkeypatch.setattr(loop, "getaddrinfo", two)
    sender = HttpSender(timeout_s=1.5, allow_private=False)
    try:
        with pytest.raises(DeliveryError) as caught:
            await sender.post("https://rebind.test/hook", content=b"{}", headers={},
                              what="webhook")
    finally:
        await sender.close()
    assert "private address 10.0.0.7" in caught.value.message and not caught.value.retryable


@pytest.mark.parametrize("address", [
    "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
    "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "fc00::1", "ff02::1",
    "::ffff:127.0.0.1", "64:ff9b::7f00:1", "64:ff9b:1::a00:1", "2002:7f00:1::1", "::7f00:1",
    "::a00:1"])
def test_non_public_ranges_are_refused(address: str) -> None:
    assert is_private_ip(address)


@pytest.mark.parametrize("address", [PUBLIC, "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_pass(address: str) -> None:
    assert not is_private_ip(address)


async def test_an_unresolvable_url_or_other_port_is_refused_at_registration(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    a = await harness.actor("max")
    fake_dns(monkeypatch, [None])
    resp = await a.user.post("/v1/push/devices", json={
        "platform": "webhook", "url": "https://rebind.test/h", "secret": SECRET})
    assert resp.status_code == 422 and "did not resolve" in resp.json()["message"], resp.text
    resp = await a.user.post("/v1/push/devices", json={
        "platform": "webhook", "url": f"https://{PUBLIC}:8443/h", "secret": SECRET})
    assert resp.status_code == 422 and "port 8443" in resp.json()["message"], resp.text
    resp = await a.user.post("/v1/push/devices", json={
        "platform": "webhook", "url": f"https://{PUBLIC}/h", "secret": SECRET})
    assert resp.status_code == 201, resp.text


async def test_the_send_time_port_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    sender = HttpSender(timeout_s=1.5, allow_private=False)
    try:
        with pytest.raises(DeliveryError) as caught:
            await sender.post(f"http://{PUBLIC}:25/x", content=b"", headers={}, what="webhook")
    finally:
        await sender.close()
    assert "port 25 is not allowed" in caught.value.message and not caught.value.retryable


# --- issue 28 item 11 and issue 34 finding 5 --------------------------------------------------

FULL_WIDTH_LOOPBACK = "１２７.０.０.１"  # the HTTP client's URL parser reads 127.0.0.1


@pytest.fixture
async def allow_private(database_url: str) -> AsyncIterator[Harness]:
    """The app with ``MAXCLAW_PUSH_ALLOW_PRIVATE_URLS=true``."""
    app = create_app(app_settings(database_url, push_allow_private_urls=True))
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")
        yield Harness(app=app, services=app.state.services, client=client)
        await client.aclose()


async def register_hook(a: Any, url: str) -> httpx.Response:
    return await a.user.post("/v1/push/devices", json={
        "platform": "webhook", "url": url, "secret": SECRET})


async def test_a_host_that_does_not_resolve_is_refused_even_where_private_is_allowed(
        allow_private: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    a = await allow_private.actor("max")
    fake_dns(monkeypatch, [None])
    resp = await register_hook(a, "https://rebind.test/h")
    assert resp.status_code == 422, resp.text
    assert resp.json()["code"] == "invalid"
    assert "did not resolve" in resp.json()["message"]
    assert resp.json()["data"]["errors"][0]["loc"] == ["body", "url"]
    # an address, or a name that resolves, is still taken (private ones: the operator's choice)
    for url in ("http://127.0.0.1/h", "http://localhost/h"):
        resp = await register_hook(a, url)
        assert resp.status_code == 201, (url, resp.text)


@pytest.mark.parametrize("url", [
    "http://a..b/h", f"http://{'a' * 64}.example/h", f"http://{'a.' * 130}example/h",
    f"http://{FULL_WIDTH_LOOPBACK}/h", "http://１２７.１/h", "https://\uff11.\uff11.\uff11.\uff11/h",
    "http://[::1]\u3002/h", "http://exa\u200dmple..com/h"])
async def test_invalid_or_disguised_hosts_are_422_never_500(
        harness: Harness, allow_private: Harness, url: str) -> None:
    for name, app in (("max", harness), ("ann", allow_private)):  # one database
        a = await app.actor(name)
        resp = await register_hook(a, url)
        assert resp.status_code == 422, (url, resp.status_code, resp.text)
        assert resp.json()["code"] == "invalid"


async def test_a_full_width_address_is_judged_as_the_client_connects() -> None:
    """Registration aside (a row written by an older version), the send refuses it too, and the
    local receiver is never reached."""
    async with Endpoint() as endpoint:
        sender = HttpSender(timeout_s=1.5, allow_private=False)
        sender.allowed_ports = frozenset({80, 443, endpoint.port})
        try:
            with pytest.raises(DeliveryError) as caught:
                await sender.post(f"http://{FULL_WIDTH_LOOPBACK}:{endpoint.port}/hook",
                                  content=b"{}", headers={}, what="webhook")
        finally:
            await sender.close()
    assert endpoint.hits == []  # before: delivered to 127.0.0.1
    assert not caught.value.retryable


async def test_the_peer_of_every_connection_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the URL guard out of the way, the connection itself refuses a private peer: an IP
    literal never goes through the resolver, so only the socket's address can be trusted."""
    async with Endpoint() as endpoint:
        sender = HttpSender(timeout_s=1.5, allow_private=False)
        sender.allowed_ports = frozenset({80, 443, endpoint.port})

        async def no_guard(url: str) -> None:
            return None

        monkeypatch.setattr(sender, "guard", no_guard)
        try:
            for url in (f"http://127.0.0.1:{endpoint.port}/hook",
                        f"http://{FULL_WIDTH_LOOPBACK}:{endpoint.port}/hook"):
                with pytest.raises(DeliveryError) as caught:
                    await sender.post(url, content=b"{}", headers={}, what="webhook")
                assert "private address 127.0.0.1" in caught.value.message
                assert not caught.value.retryable
        finally:
            await sender.close()
    assert endpoint.hits == []


@pytest.mark.parametrize("address", ["fec0::1", "feff::1", "3fff::1", "3fff:fff::1"])
def test_site_local_and_the_new_documentation_prefix_are_refused(address: str) -> None:
    assert is_private_ip(address)
