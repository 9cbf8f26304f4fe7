"""The ``maxclaw agent`` and ``maxclaw demo`` commands (``maxclaw.cli`` delegates here)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

from maxclaw.client.runtime.model import Model


class UsageError(Exception):
    """A command line that cannot work; the message says how to fix it."""


def build_model(spec: str) -> Model:
    """``openai`` (settings from MAXCLAW_OPENAI_*) or ``scripted:FILE``."""
    if spec == "openai":
        from maxclaw.client.runtime.openai_model import OpenAIChatModel, OpenAISettings

        settings = OpenAISettings()
        if not settings.api_key and "api.openai.com" in settings.base_url:
            raise UsageError("set MAXCLAW_OPENAI_API_KEY (or OPENAI_API_KEY), or point "
                             "MAXCLAW_OPENAI_BASE_URL at an OpenAI-compatible server")
        return OpenAIChatModel(settings)
    kind, _, path = spec.partition(":")
    if kind == "scripted" and path:
        from maxclaw.client.runtime.scripted import ScriptedModel

        if not Path(path).is_file():
            raise UsageError(f"no script file at {path}")
        try:
            return ScriptedModel.from_file(path)
        except ValueError as exc:  # pydantic and YAML errors are ValueErrors
            raise UsageError(f"the script {path} is not valid: {exc}") from None
    raise UsageError(f"unknown model {spec!r}: use 'openai' or 'scripted:FILE'")


def run_agent(base_url: str, token: str, model_spec: str, workspace: Path,
              runtime_id: str | None, once: bool, wait_s: float) -> None:
    """Claim and run turns until SIGINT/SIGTERM (or one turn with ``once``)."""
    from maxclaw.client.http import AgentClient
    from maxclaw.client.runtime.loop import AgentRuntime
    from maxclaw.client.runtime.workspace_tools import LocalTools

    model = build_model(model_spec)

    async def main() -> None:
        client = AgentClient(base_url, token)
        runtime = AgentRuntime(client, model, LocalTools(workspace), runtime_id=runtime_id)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        try:
            if once:
                await runtime.run_once(wait_s)
            else:
                await runtime.run_forever(stop, wait_s)
        finally:
            await runtime.aclose()
            await client.aclose()

    asyncio.run(main())
