"""A sealed box on its way into ``message_secrets``: ``Sealed`` lives with the timeline rows it
is written with (``maxclaw.timeline.rows``), so the timeline store imports nothing of secrets."""

from __future__ import annotations

from maxclaw.timeline.rows import Sealed

__all__ = ["Sealed"]
