"""MaxClaw's benchmark suite: the service measured against the physical limit of the machine.

Run ``python -m bench`` (``--quick`` for about a minute). See ``docs/benchmarks.md``.
"""
