"""Refusing push targets on loopback or private networks (unless the operator allows them).

A webhook URL or a Web Push endpoint is an address a user hands the server to POST to; left
unchecked it would let any user make the server call its own network. The check runs when a
device is registered (early, clear feedback) and again before every send (names can change
what they resolve to).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

LOCAL_NAMES = ("localhost", "localhost.localdomain")


def is_private_ip(text: str) -> bool:
    """Whether an IP literal is anything but a public unicast address."""
    ip = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def literal_ip(host: str) -> str | None:
    """``host`` if it is an IP literal (brackets removed), else None."""
    bare = host.strip("[]")
    try:
        ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        return None
    return bare


def host_of(url: str) -> str:
    """The host of an http(s) URL; ValueError when the URL is not one."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http or https URL with a host")
    return parts.hostname


def local_reason(host: str) -> str | None:
    """Why ``host`` is local without asking DNS (an IP literal or a localhost name), or None."""
    name = host.lower().rstrip(".")
    if name in LOCAL_NAMES or name.endswith(".localhost"):
        return f"{host} is a loopback name"
    ip = literal_ip(name)
    if ip is not None and is_private_ip(ip):
        return f"{host} is a loopback or private address"
    return None


async def resolved_private_reason(host: str, timeout_s: float = 3.0) -> str | None:
    """Why ``host`` resolves to a local address, or None (also None when it does not resolve:
    the send-time check runs again, and an unresolvable name cannot be reached anyway)."""
    reason = local_reason(host)
    if reason or literal_ip(host) is not None:
        return reason
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, None, type=socket.SOCK_STREAM), timeout_s)
    except (OSError, TimeoutError):
        return None
    for info in infos:
        address = str(info[4][0])
        if is_private_ip(address):
            return f"{host} resolves to the private address {address}"
    return None
