"""Refusing push targets on loopback or private networks (unless the operator allows them).

A webhook URL or a Web Push endpoint is an address a user hands the server to POST to; left
unchecked it would let any user make the server call its own network. The check runs when a
device is registered (early, clear feedback) and again at every send, where the name is
resolved once, every address it answers is checked, and the connection goes to a checked
address (``push/adapters/http.py``'s resolver): a name that answers a public address to the
check and 127.0.0.1 to the connect (DNS rebinding) cannot slip between the two. A lookup that
fails refuses; only ports 80 and 443 are allowed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

LOCAL_NAMES = ("localhost", "localhost.localdomain")
ALLOWED_PORTS = frozenset({80, 443})
LOOKUP_TIMEOUT_S = 3.0
# ranges Python's ``is_global`` lets through but that reach IPv4 space behind them: NAT64
# (well-known and local-use), 6to4, and the deprecated IPv4-compatible form
_TUNNELS = tuple(ipaddress.ip_network(n) for n in
                 ("64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "::/96"))

# (host, port) → the addresses it resolves to (the result of ``getaddrinfo``)
Lookup = Callable[[str, int], Awaitable[list[Any]]]


class AddressRefused(OSError):
    """A push target that is not a public address (or does not resolve)."""

    def __init__(self, reason: str, *, retryable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


def is_private_ip(text: str) -> bool:
    """Whether an IP literal is anything but a public unicast address."""
    ip = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif any(ip in net for net in _TUNNELS):
            return True
    return (not ip.is_global or ip.is_multicast or ip.is_unspecified or ip.is_link_local
            or ip.is_reserved)


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


def port_of(url: str) -> int:
    """The port an http(s) URL connects to; ValueError when it is not a number."""
    parts = urlsplit(url)
    port = parts.port  # raises ValueError when out of range
    return port if port is not None else (443 if parts.scheme == "https" else 80)


def port_reason(url: str, allowed: frozenset[int] = ALLOWED_PORTS) -> str | None:
    """Why the URL's port is refused (only 80 and 443 are allowed), or None."""
    try:
        port = port_of(url)
    except ValueError:
        return "the URL's port is not a number from 1 to 65535"
    if port not in allowed:
        return f"port {port} is not allowed (only {', '.join(map(str, sorted(allowed)))})"
    return None


def local_reason(host: str) -> str | None:
    """Why ``host`` is local without asking DNS (an IP literal or a localhost name), or None."""
    name = host.lower().rstrip(".")
    if name in LOCAL_NAMES or name.endswith(".localhost"):
        return f"{host} is a loopback name"
    ip = literal_ip(name)
    if ip is not None and is_private_ip(ip):
        return f"{host} is a loopback or private address"
    return None


async def system_lookup(host: str, port: int) -> list[Any]:
    """``getaddrinfo`` on the running loop (TCP only)."""
    loop = asyncio.get_running_loop()
    return list(await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))


async def checked_addresses(host: str, port: int, lookup: Lookup | None = None,
                            timeout_s: float = LOOKUP_TIMEOUT_S) -> list[Any]:
    """Resolve ``host`` once and return its ``getaddrinfo`` entries if every address is public.

    Raises ``AddressRefused``: retryable when the lookup failed or timed out (nothing is
    connected to), permanent when any address is loopback, private, link-local, multicast,
    unspecified, reserved or a tunnel into those (NAT64, 6to4, IPv4-compatible)."""
    reason = local_reason(host)
    if reason:
        raise AddressRefused(reason)
    try:
        infos = await asyncio.wait_for((lookup or system_lookup)(host, port), timeout_s)
    except (OSError, TimeoutError) as exc:
        raise AddressRefused(f"{host} did not resolve ({type(exc).__name__})",
                             retryable=True) from exc
    if not infos:
        raise AddressRefused(f"{host} did not resolve (no addresses)", retryable=True)
    for info in infos:
        address = str(info[4][0])
        if is_private_ip(address):
            raise AddressRefused(f"{host} resolves to the private address {address}")
    return infos


async def resolved_private_reason(host: str, timeout_s: float = LOOKUP_TIMEOUT_S,
                                  lookup: Lookup | None = None) -> str | None:
    """Why ``host`` may not be pushed to (local, resolves to a local address, or does not
    resolve), or None."""
    reason = local_reason(host)
    if reason or literal_ip(host) is not None:
        return reason
    try:
        await checked_addresses(host, 0, lookup, timeout_s)
    except AddressRefused as exc:
        return exc.reason
    return None
