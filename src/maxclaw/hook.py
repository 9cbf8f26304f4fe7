"""``maxclaw-hook``: Claude Code's command hooks, answered from the standard library alone.

A host runs its hook command on every prompt, tool call and stop, so the command must be
quick: this module imports nothing but the standard library (``maxclaw/__init__.py`` is a
docstring and a version), so it answers in tens of milliseconds where ``maxclaw inbox`` pays
for the CLI's imports first (bench/hook_latency.py measures both).

The hook reads the host's event from stdin (``hook_event_name``, ``stop_hook_active``) and:

- ``SessionStart``, ``UserPromptSubmit``, ``PostToolUse``: takes the thread's inbox (what
  arrived since the last delivery, marked delivered) and prints
  ``{"hookSpecificOutput": {"hookEventName", "additionalContext"}}`` — nothing when nothing
  arrived, so the host adds nothing to the model's context;
- ``Stop``: when an answer is waiting, prints ``{"decision": "block", "reason": …}`` with it,
  so the host goes on with the answer instead of stopping; otherwise nothing (the stop goes
  through). When ``stop_hook_active`` is set (the host is already going on because of a Stop
  hook) it lets the stop through without asking the server, so it can never loop; what
  arrives meanwhile waits for the next prompt, session or the bridge.

Configuration: ``--url``/``MAXCLAW_URL``, ``--thread``/``MAXCLAW_THREAD``, the agent token in
``MAXCLAW_TOKEN``. A hook that cannot reach the server, or is not configured, prints nothing
and exits 0: it never blocks the host.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from urllib.parse import quote, urlsplit

# ``typing`` alone can cost tens of milliseconds on a busy machine: names for the type
# checker only (annotations are not evaluated at run time)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

HOOK_HEADER = "MaxClaw delivered (each message once; they answer your earlier questions):"
STOP_HEADER = ("MaxClaw: Max answered while you were finishing. Go on with his answer "
               "(each message is delivered once):")
CONTEXT_EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse")
DEFAULT_URL = "http://127.0.0.1:8765"
TIMEOUT_S = 3.0


def texts_of(messages: list[dict[str, Any]]) -> list[str]:
    texts = [str(m.get("content") or "") for m in messages if isinstance(m, dict)]
    return [t for t in texts if t]


def hook_output(messages: list[dict[str, Any]], event: str = "PostToolUse") -> str | None:
    """The hook's stdout for a delivery, or None for an empty one."""
    texts = texts_of(messages)
    if not texts:
        return None
    if event == "Stop":
        return json.dumps({"decision": "block", "reason": "\n\n".join([STOP_HEADER, *texts])},
                          ensure_ascii=False)
    context = "\n\n".join([HOOK_HEADER, *texts])
    return json.dumps({"hookSpecificOutput": {"hookEventName": event,
                                              "additionalContext": context}},
                      ensure_ascii=False)


def take_inbox(url: str, token: str, thread_id: str,
               timeout_s: float = TIMEOUT_S) -> list[dict[str, Any]] | None:
    """``POST /v1/agent/threads/{id}/inbox``; None when it did not answer with messages."""
    parts = urlsplit(url)
    path = f"{parts.path.rstrip('/')}/v1/agent/threads/{quote(thread_id, safe='')}/inbox"
    host = parts.hostname or "127.0.0.1"
    if parts.scheme == "https":
        status, body = _https_post(host, parts.port or 443, path, token, timeout_s)
    else:
        status, body = _http_post(host, parts.port or 80, path, token, timeout_s)
    if status != 200:
        return None
    messages = json.loads(body).get("messages")
    return messages if isinstance(messages, list) else None


def _http_post(host: str, port: int, path: str, token: str,
               timeout_s: float) -> tuple[int, bytes]:
    """One HTTP/1.1 POST on a plain socket: ``http.client`` imports the ``email`` package,
    which costs more than the whole request on a busy machine."""
    request = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
               f"Authorization: Bearer {token}\r\nContent-Length: 0\r\n"
               "Accept: application/json\r\nConnection: close\r\n\r\n").encode("latin-1")
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _unchunk(body)
    return status, body


def _unchunk(data: bytes) -> bytes:
    out = []
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out.append(data[:size])
        data = data[size + 2:]
    return b"".join(out)


def _https_post(host: str, port: int, path: str, token: str,
                timeout_s: float) -> tuple[int, bytes]:
    import http.client  # TLS: the standard client (ssl costs more than email anyway)

    conn = http.client.HTTPSConnection(host, port, timeout=timeout_s)
    try:
        conn.request("POST", path, body=b"", headers={"Authorization": f"Bearer {token}",
                                                      "Content-Length": "0"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _event(stdin_text: str) -> dict[str, Any]:
    try:
        data = json.loads(stdin_text) if stdin_text.strip() else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _option(argv: list[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def run(argv: list[str], stdin_text: str, env: dict[str, str]) -> str | None:
    """What the hook prints (None: nothing) for this event."""
    event = _event(stdin_text)
    name = str(event.get("hook_event_name") or _option(argv, "--event") or "PostToolUse")
    if name == "Stop" and event.get("stop_hook_active"):
        return None  # already going on because of a Stop hook: let this stop through
    if name != "Stop" and name not in CONTEXT_EVENTS:
        return None
    url = _option(argv, "--url") or env.get("MAXCLAW_URL") or DEFAULT_URL
    thread = _option(argv, "--thread") or env.get("MAXCLAW_THREAD")
    token = env.get("MAXCLAW_TOKEN")
    if not thread or not token:
        return None
    messages = take_inbox(url, token, thread)
    return hook_output(messages, name) if messages else None


def main() -> None:
    """Print the hook's answer, or nothing; always exit 0 (a hook never blocks the host)."""
    try:
        stdin_text = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
        line = run(sys.argv[1:], stdin_text, dict(os.environ))
    except Exception:  # unreachable, refused, garbled: the host goes on, never blocked
        line = None
    if line is not None:
        sys.stdout.write(line + "\n")
    sys.exit(0)


if __name__ == "__main__":
    main()
