"""Operator tooling: retention (``maxclaw prune``), the schema check (``migrate --check``)."""
