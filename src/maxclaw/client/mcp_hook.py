"""``maxclaw inbox``'s hook format: a thread's inbox as a command hook's output.

``--format hook`` prints what hosts with command hooks read (Claude Code's ``PostToolUse``,
``SessionStart``, ``UserPromptSubmit``: ``{"hookSpecificOutput": {"hookEventName",
"additionalContext"}}``; ``Stop``: ``{"decision": "block", "reason"}``) — and prints nothing
at all when nothing arrived, so the host adds nothing to the model's context. The shapes live in
``maxclaw.hook`` (the stdlib-only ``maxclaw-hook`` command hosts should run instead: it starts
in tens of milliseconds where the CLI takes about a second).
"""

from __future__ import annotations

from maxclaw.hook import HOOK_HEADER, STOP_HEADER, hook_output

__all__ = ["HOOK_HEADER", "STOP_HEADER", "hook_output"]
