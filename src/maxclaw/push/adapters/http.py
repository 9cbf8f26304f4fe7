"""The HTTP client the webhook and Web Push adapters share, and the send-time address guard.

aiohttp rather than httpx: on this project's machine a pooled aiohttp session posted to a local
endpoint about ten times faster than httpx at the same concurrency (0.22 s against 2.2 s for
500 POSTs at 16 in flight), and the dispatcher's throughput is bounded by exactly that.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from maxclaw.push.adapters.base import DeliveryError
from maxclaw.push.addresses import (
    ALLOWED_PORTS,
    AddressRefused,
    Lookup,
    checked_socket,
    host_of,
    local_reason,
    port_reason,
)

# aiohttp loads with the first push session (``HttpSender.session``), not with the server: every
# start paid for it, most servers send few pushes (docs/benchmarks.md, issue 33 item 4, fifth
# pass). The resolver, a subclass of aiohttp's, lives in ``resolver.py`` for the same reason.
if TYPE_CHECKING:
    import aiohttp

USER_AGENT = "MaxClaw-Push/0.1"
RESPONSE_PEEK_BYTES = 2048  # enough of an error body to explain it; never the whole thing


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    text: str
    retry_after: str | None


def _refusal(exc: BaseException) -> AddressRefused | None:
    """The ``AddressRefused`` behind an aiohttp connector error, if that is what it is."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, AddressRefused):
            return seen
        inner: Any = getattr(seen, "os_error", None)
        seen = inner if isinstance(inner, BaseException) and inner is not seen \
            else seen.__cause__
    return None


class HttpSender:
    """One pooled ``aiohttp.ClientSession``, opened on first use, closed by the dispatcher.

    Unless private URLs are allowed, the session's connector resolves through
    ``CheckedResolver`` and only ports 80/443 are used. ``lookup`` replaces ``getaddrinfo``
    (tests use a resolver that changes its answer); ``allowed_ports`` likewise."""

    def __init__(self, *, timeout_s: float, allow_private: bool, lookup: Lookup | None = None,
                 allowed_ports: frozenset[int] = ALLOWED_PORTS) -> None:
        self.timeout_s = timeout_s
        self.allow_private = allow_private
        self.lookup = lookup
        self.allowed_ports = allowed_ports
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._session is None or self._session.closed:
            # no proxy settings from the environment (trust_env=False): pushes go straight to
            # the address registered, and only there (redirects are refused per request)
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s), trust_env=False,
                headers={"User-Agent": USER_AGENT},
                connector=self._connector())
        return self._session

    def _connector(self) -> aiohttp.TCPConnector:
        import aiohttp

        from maxclaw.push.adapters.resolver import CheckedResolver

        if self.allow_private:
            return aiohttp.TCPConnector(limit=50, limit_per_host=20)
        # no DNS cache: each new connection resolves (once) and is checked; the socket factory
        # checks the address each connection dials, IP literals (never resolved) included
        return aiohttp.TCPConnector(limit=50, limit_per_host=20, use_dns_cache=False,
                                    resolver=CheckedResolver(self.lookup),
                                    socket_factory=checked_socket)

    async def guard(self, url: str) -> None:
        """Refuse a URL that is not http(s) on port 80/443 or names a private IP literal or
        localhost (a permanent failure). Names are checked by the resolver when connecting."""
        if self.allow_private:
            return
        try:
            host = host_of(url)
        except ValueError as exc:
            raise DeliveryError(f"bad push address: {exc}", retryable=False) from exc
        reason = local_reason(host) or port_reason(url, self.allowed_ports)
        if reason:
            raise DeliveryError(
                f"refused: {reason} (set MAXCLAW_PUSH_ALLOW_PRIVATE_URLS=true to allow it)",
                retryable=False)

    async def post(self, url: str, *, content: bytes, headers: dict[str, str],
                   what: str) -> HttpAnswer:
        """POST after the guard; transport failures become retryable ``DeliveryError``s."""
        import aiohttp

        await self.guard(url)
        try:
            async with self.session().post(url, data=content, headers=headers,
                                           allow_redirects=False) as resp:
                peek = await resp.content.read(RESPONSE_PEEK_BYTES)
                return HttpAnswer(resp.status, peek.decode("utf-8", "replace"),
                                  resp.headers.get("Retry-After"))
        except TimeoutError as exc:
            raise DeliveryError(f"{what} timed out after {self.timeout_s:g}s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            refused = _refusal(exc)
            if refused is not None:
                hint = "" if refused.retryable else \
                    " (set MAXCLAW_PUSH_ALLOW_PRIVATE_URLS=true to allow it)"
                raise DeliveryError(f"refused: {refused.reason}{hint}",
                                    retryable=refused.retryable) from exc
            raise DeliveryError(f"{what} unreachable: {type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
            await asyncio.sleep(0)  # let the connector's transports finish closing
