"""``maxclaw inbox``: a thread's inbox for agent hosts, as JSON or as a command hook's output.

``--format hook`` prints what hosts with command hooks read after a tool call (Claude Code's
``PostToolUse`` and hosts that copy it): ``{"hookSpecificOutput": {"hookEventName",
"additionalContext"}}``, the context being the delivered messages as text — and prints nothing
at all when nothing arrived, so the host adds nothing to the model's context.
"""

from __future__ import annotations

import json
from typing import Any

HOOK_HEADER = "MaxClaw delivered (each message once; they answer your earlier questions):"


def hook_output(messages: list[dict[str, Any]], event: str = "PostToolUse") -> str | None:
    """The hook's stdout for a delivery, or None for an empty one."""
    texts = [str(m.get("content") or "") for m in messages]
    texts = [t for t in texts if t]
    if not texts:
        return None
    context = "\n\n".join([HOOK_HEADER, *texts])
    return json.dumps({"hookSpecificOutput": {"hookEventName": event,
                                              "additionalContext": context}},
                      ensure_ascii=False)
