"""The address-checking resolver push's HTTP sessions connect through (``http.HttpSender``),
in a module of its own so that aiohttp loads with the first push session, not the server."""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult

from maxclaw.push.addresses import Lookup, checked_addresses


class CheckedResolver(AbstractResolver):
    """aiohttp's resolver for push: one lookup per connection, every address checked, and
    aiohttp connects only to what this returns, i.e. to checked addresses (no second lookup a
    rebinding name could answer differently). Refusals are ``AddressRefused`` (an OSError, so
    aiohttp reports them as a connector error carrying it)."""

    def __init__(self, lookup: Lookup | None = None) -> None:
        self.lookup = lookup

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        infos = await checked_addresses(host, port, self.lookup)
        out: list[ResolveResult] = []
        for fam, _, proto, _, sockaddr in infos:
            out.append({"hostname": host, "host": str(sockaddr[0]), "port": port,
                        "family": fam, "proto": proto,
                        "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV})
        return out

    async def close(self) -> None:
        return None
