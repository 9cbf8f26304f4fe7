"""Attach this capability's services and jobs to the container."""

from __future__ import annotations

from maxclaw.container import Services


def register(services: Services) -> None:
    """Nothing yet: this capability lands with its issue."""
    return None
