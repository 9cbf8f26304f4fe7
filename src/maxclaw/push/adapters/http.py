"""The HTTP client the webhook and Web Push adapters share, and the send-time address guard.

aiohttp rather than httpx: on this project's machine a pooled aiohttp session posted to a local
endpoint about ten times faster than httpx at the same concurrency (0.22 s against 2.2 s for
500 POSTs at 16 in flight), and the dispatcher's throughput is bounded by exactly that.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp

from maxclaw.push.adapters.base import DeliveryError
from maxclaw.push.addresses import host_of, resolved_private_reason

USER_AGENT = "MaxClaw-Push/0.1"
RESPONSE_PEEK_BYTES = 2048  # enough of an error body to explain it; never the whole thing


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    text: str
    retry_after: str | None


class HttpSender:
    """One pooled ``aiohttp.ClientSession``, opened on first use, closed by the dispatcher."""

    def __init__(self, *, timeout_s: float, allow_private: bool) -> None:
        self.timeout_s = timeout_s
        self.allow_private = allow_private
        self._session: aiohttp.ClientSession | None = None

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # no proxy settings from the environment (trust_env=False): pushes go straight to
            # the address registered, and only there (redirects are refused per request)
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s), trust_env=False,
                headers={"User-Agent": USER_AGENT},
                connector=aiohttp.TCPConnector(limit=128, limit_per_host=64))
        return self._session

    async def guard(self, url: str) -> None:
        """Refuse a URL on a private network unless allowed (a permanent failure)."""
        if self.allow_private:
            return
        try:
            host = host_of(url)
        except ValueError as exc:
            raise DeliveryError(f"bad push address: {exc}", retryable=False) from exc
        reason = await resolved_private_reason(host)
        if reason:
            raise DeliveryError(
                f"refused: {reason} (set MAXCLAW_PUSH_ALLOW_PRIVATE_URLS=true to allow it)",
                retryable=False)

    async def post(self, url: str, *, content: bytes, headers: dict[str, str],
                   what: str) -> HttpAnswer:
        """POST after the guard; transport failures become retryable ``DeliveryError``s."""
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
            raise DeliveryError(f"{what} unreachable: {type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
            await asyncio.sleep(0)  # let the connector's transports finish closing
