"""What clients see of a decision (REST, WebSocket). ``answer_text`` is already a placeholder
for sensitive cards in storage, so nothing here can leak a secret."""

from __future__ import annotations

from typing import Any

from maxclaw.timefmt import rfc3339, rfc3339_or_none


def decision_projection(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"], "kind": row["kind"], "status": row["status"],
        "component_id": row["component_id"],
        "thread_id": str(row["thread_id"]) if row["thread_id"] is not None else None,
        "title": row["title"], "body": row["body"], "options": row["options"],
        "allow_text": row["allow_text"], "sensitive": row["sensitive"],
        "answer_text": row["answer_text"], "settled_via": row["settled_via"], "bar": row["bar"],
        "bar_snoozed_until": rfc3339_or_none(row["bar_snoozed_until"]),
        "created_at": rfc3339(row["created_at"]),
        "settled_at": rfc3339_or_none(row["settled_at"]), "rev": row["rev"],
    }
