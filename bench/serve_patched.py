"""A prototype, for measurement only: ``maxclaw serve`` with two request-path changes.

``python -m bench.serve_patched serve --port P`` is ``python -m maxclaw.cli serve`` except:
- the ``Services`` dependency is ``async def`` (``maxclaw.api.deps._services`` is a plain
  ``def``, so FastAPI runs it in a worker thread on every request: a thread-pool hop that the
  server profile shows as ~11% of its busy samples in ``threading.Condition.notify``);
- FastAPI's built-in telemetry is configured off (``FastAPI(telemetry=…)``); unconfigured, it
  asks OpenTelemetry for its providers on every request, reading ``os.environ`` (~3%).
The lead decides whether to adopt them in ``maxclaw.api.deps`` and ``maxclaw.app``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

import maxclaw.api.deps as deps


async def _services(request: Request) -> Any:
    return request.app.state.services


# before maxclaw.app imports the routers, which take ``Services`` from deps at import time
deps._services = _services
deps.Services = Annotated[Any, Depends(_services)]

import maxclaw.app as app_module  # noqa: E402  (after the patch above, on purpose)

_FastAPI = app_module.FastAPI  # type: ignore[attr-defined]


def _fastapi_without_telemetry(*args: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("telemetry", {"tracing": False, "metrics": False, "logs": False})
    return _FastAPI(*args, **kwargs)


app_module.FastAPI = _fastapi_without_telemetry  # type: ignore[attr-defined,assignment]

if __name__ == "__main__":
    from maxclaw.cli import main

    main()
