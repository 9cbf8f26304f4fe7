"""The development adapter: a ``log`` device's pushes go to the structured log.

Payloads hold no secret (a sensitive card's payload has only its placeholder), so logging them
is safe; ``MAXCLAW_PUSH_LOG_PAYLOADS=false`` logs ids only.
"""

from __future__ import annotations

import logging

from maxclaw.push.adapters.base import Delivery

log = logging.getLogger("maxclaw.push.log")


class LogAdapter:
    platform = "log"

    def __init__(self, *, log_payloads: bool = True) -> None:
        self.log_payloads = log_payloads

    async def send(self, delivery: Delivery) -> None:
        """Write one log line per delivery."""
        extra = {"outbox_id": delivery.outbox_id, "device_id": delivery.device_id,
                 "user_id": delivery.user_id, "decision_id": delivery.decision_id,
                 "platform": self.platform, "kind": delivery.kind,
                 "collapse_id": delivery.payload.get("collapse_id")}
        if self.log_payloads:
            extra["payload"] = delivery.payload
        log.info("push (log adapter)", extra=extra)

    async def close(self) -> None:
        return None
