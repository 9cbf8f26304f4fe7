"""Refusing push targets on loopback or private networks (unless the operator allows them).

A webhook URL or a Web Push endpoint is an address a user hands the server to POST to; left
unchecked it would let any user make the server call its own network. The check runs when a
device is registered (early, clear feedback) and again at every send, where the name is
resolved once, every address it answers is checked, and the connection goes to a checked
address (``push/adapters/http.py``'s resolver): a name that answers a public address to the
check and 127.0.0.1 to the connect (DNS rebinding) cannot slip between the two. A lookup that
fails refuses; only ports 80 and 443 are allowed. The host checked is the one the HTTP client
connects to (``connect_host``: yarl's IDNA/UTS-46 form, so 127.0.0.1 written in full-width
digits is judged as the ``127.0.0.1`` aiohttp would dial), and the socket factory
(``checked_socket``) checks the address of every connection, IP literals included, since
aiohttp resolves no literal.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import yarl

LOCAL_NAMES = ("localhost", "localhost.localdomain")
ALLOWED_PORTS = frozenset({80, 443})
LOOKUP_TIMEOUT_S = 3.0
# ranges Python's ``is_global`` lets through but that reach IPv4 space behind them: NAT64
# (well-known and local-use), 6to4, and the deprecated IPv4-compatible form
_TUNNELS = tuple(ipaddress.ip_network(n) for n in
                 ("64:ff9b::/96", "64:ff9b:1::/48", "2002::/16", "::/96"))
# IPv6 ranges ``is_global`` calls global that are not: site-local (deprecated, still routed
# inside some networks) and the documentation prefix of RFC 9637
_NOT_PUBLIC_V6 = tuple(ipaddress.ip_network(n) for n in ("fec0::/10", "3fff::/20"))
MAX_NAME_LENGTH = 253
MAX_LABEL_LENGTH = 63

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
        elif any(ip in net for net in _TUNNELS + _NOT_PUBLIC_V6):
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


def _numeric_host(host: str) -> bool:
    """Whether the resolver reads ``host`` as an IPv4 address (``127.1``, ``0x7f.1``,
    ``2130706433``: ``inet_aton``'s forms)."""
    try:
        socket.inet_aton(host.rstrip("."))
    except (OSError, ValueError):
        return False
    return True


def _name_reason(host: str) -> str | None:
    """Why ``host`` (ASCII, not an IP literal) is not a DNS name the resolver accepts."""
    name = host[:-1] if host.endswith(".") else host
    if not name or len(name) > MAX_NAME_LENGTH:
        return f"the host name must be 1 to {MAX_NAME_LENGTH} characters"
    for label in name.split("."):
        if not label:
            return "the host name has an empty label (two dots in a row?)"
        if len(label) > MAX_LABEL_LENGTH:
            return f"a label of the host name is longer than {MAX_LABEL_LENGTH} characters"
    try:
        name.encode("idna")  # what getaddrinfo does with it
    except UnicodeError:
        return "the host name is not a valid international domain name"
    return None


def connect_host(url: str) -> str:
    """The host an http(s) URL's request connects to, as the HTTP client (aiohttp, through
    yarl) computes it: IDNA/UTS-46 normalised, IP literals without brackets. ``ValueError``
    (a sentence for the user) when the URL is not http(s), its host is not a valid name, or
    a non-ASCII host normalises to an address (127.0.0.1 in full-width digits: refused
    whatever the address, as no honest push target is written that way)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http or https URL with a host")
    try:
        host = yarl.URL(url).raw_host
    except (ValueError, UnicodeError) as exc:
        raise ValueError("the URL's host is not a valid host name") from exc
    if not host:
        raise ValueError("must be an http or https URL with a host")
    literal = literal_ip(host)
    if not parts.hostname.isascii() and (literal is not None or _numeric_host(host)):
        raise ValueError(f"the host {parts.hostname!r} is an address written in non-ASCII "
                         "characters; write the host in ASCII")
    if literal is None:
        reason = _name_reason(host)
        if reason:
            raise ValueError(reason)
    return host


def host_of(url: str) -> str:
    """The host of an http(s) URL as the client connects to it (``connect_host``)."""
    return connect_host(url)


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
    except (OSError, TimeoutError, UnicodeError) as exc:
        raise AddressRefused(f"{host} did not resolve ({type(exc).__name__})",
                             retryable=True) from exc
    if not infos:
        raise AddressRefused(f"{host} did not resolve (no addresses)", retryable=True)
    for info in infos:
        address = str(info[4][0])
        if is_private_ip(address):
            raise AddressRefused(f"{host} resolves to the private address {address}")
    return infos


def checked_socket(addr_info: Any) -> socket.socket:
    """aiohttp's socket factory for push: the address of every connection is checked just
    before it is dialled, whether it came from the checked resolver or from an IP literal
    (which aiohttp never resolves). ``AddressRefused`` when it is not public."""
    family, type_, proto, _, sockaddr = addr_info
    address = str(sockaddr[0])
    if is_private_ip(address):
        raise AddressRefused(f"the connection would go to the private address {address}")
    return socket.socket(family=family, type=type_, proto=proto)


async def unresolved_reason(host: str, timeout_s: float = LOOKUP_TIMEOUT_S,
                            lookup: Lookup | None = None) -> str | None:
    """Why ``host`` cannot be pushed to even where private addresses are allowed: a name that
    does not resolve (an IP literal always does), or None."""
    if literal_ip(host) is not None:
        return None
    try:
        infos = await asyncio.wait_for((lookup or system_lookup)(host, 0), timeout_s)
    except (OSError, TimeoutError, UnicodeError) as exc:
        return f"{host} did not resolve ({type(exc).__name__})"
    return None if infos else f"{host} did not resolve (no addresses)"


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
