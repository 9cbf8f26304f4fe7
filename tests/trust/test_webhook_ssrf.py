"""Finding 1: webhook SSRF by DNS rebinding.

A fake ``getaddrinfo`` (installed on the running loop, where both the old guard and aiohttp's
default resolver asked) answers differently on each lookup. The receiver is a real HTTP server
on 127.0.0.1: a request reaching it is the SSRF.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import pytest

from maxclaw.push.adapters.base import DeliveryError
from maxclaw.push.adapters.http import HttpSender
from maxclaw.push.addresses import is_private_ip
from tests.conftest import Harness
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
