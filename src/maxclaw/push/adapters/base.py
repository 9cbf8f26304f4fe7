"""What every adapter gets (a ``Delivery``) and how it reports failure (``DeliveryError``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

ERROR_TEXT_LIMIT = 300


@dataclass(frozen=True)
class Delivery:
    """One claimed outbox row and the device it goes to."""

    outbox_id: int
    user_id: str
    device_id: int
    decision_id: int | None
    kind: str  # notify | withdraw | activity
    payload: dict[str, Any]
    platform: str
    config: dict[str, Any]
    secret: str | None
    attempt: int

    @property
    def idempotency_key(self) -> str:
        """Stable across retries of this row: receivers drop a key they have already seen."""
        return str(self.outbox_id)


class DeliveryError(Exception):
    """A failed send. ``retryable`` False ends the row at once (``dead``); ``device_gone``
    means the receiver says this device will never take a push again (Web Push 404/410,
    APNs 410 ``Unregistered``, a webhook's 410): the dispatcher removes the device.
    ``token_gone``: only the Live Activity token this ``activity`` row went to is dead (APNs
    410): the dispatcher forgets that token and keeps the device."""

    def __init__(self, message: str, *, retryable: bool = True,
                 retry_after_s: float | None = None, device_gone: bool = False,
                 token_gone: bool = False) -> None:
        super().__init__(message[:ERROR_TEXT_LIMIT])
        self.message = message[:ERROR_TEXT_LIMIT]
        self.retryable = retryable and not device_gone and not token_gone
        self.retry_after_s = retry_after_s
        self.device_gone = device_gone
        self.token_gone = token_gone


class Adapter(Protocol):
    """Sends one delivery or raises ``DeliveryError``; ``close`` releases connections."""

    platform: str

    async def send(self, delivery: Delivery) -> None: ...

    async def close(self) -> None: ...


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (the HTTP-date form is rare from push services)."""
    if not value:
        return None
    try:
        return max(float(value.strip()), 0.0)
    except ValueError:
        return None


def check_http_status(status: int, text: str, retry_after: str | None, what: str) -> None:
    """Raise for a non-2xx answer: 408/425/429/5xx are worth retrying, other codes are not."""
    if 200 <= status < 300:
        return
    detail = " ".join(text.split())[:200]
    message = f"{what} answered HTTP {status}" + (f": {detail}" if detail else "")
    retryable = status in (408, 425, 429) or status >= 500
    raise DeliveryError(message, retryable=retryable, device_gone=status == 410,
                        retry_after_s=retry_after_seconds(retry_after))
