"""The HTTP client the webhook and Web Push adapters share, and the send-time address guard."""

from __future__ import annotations

import httpx

from maxclaw.push.adapters.base import DeliveryError
from maxclaw.push.addresses import host_of, resolved_private_reason

USER_AGENT = "MaxClaw-Push/0.1"


class HttpSender:
    """One pooled ``httpx.AsyncClient``, opened on first use, closed by the dispatcher."""

    def __init__(self, *, timeout_s: float, allow_private: bool) -> None:
        self.timeout_s = timeout_s
        self.allow_private = allow_private
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            # no redirects (a 3xx could point anywhere, past the address guard) and no proxy
            # settings from the environment: pushes go straight to the address registered
            self._client = httpx.AsyncClient(
                timeout=self.timeout_s, follow_redirects=False, trust_env=False,
                headers={"User-Agent": USER_AGENT},
                limits=httpx.Limits(max_connections=50, max_keepalive_connections=20))
        return self._client

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
                   what: str) -> httpx.Response:
        """POST after the guard; transport failures become retryable ``DeliveryError``s."""
        await self.guard(url)
        try:
            return await self.client.post(url, content=content, headers=headers)
        except httpx.TimeoutException as exc:
            raise DeliveryError(f"{what} timed out after {self.timeout_s:g}s") from exc
        except httpx.HTTPError as exc:
            raise DeliveryError(f"{what} unreachable: {type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
