"""``maxclaw secrets …``: keys, rotation, purge and the retention pass, for operators."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from maxclaw.settings import Settings

if TYPE_CHECKING:  # imported lazily at run time, like the rest of the CLI
    from maxclaw.composition import Services
    from maxclaw.secrets.keyring import Keyring

secrets_app = typer.Typer(no_args_is_help=True,
                          help="Secret answers at rest: keys, rotation, retention.")
DatabaseUrl = Annotated[str | None, typer.Option(
    "--database-url", help="PostgreSQL URL (default: MAXCLAW_DATABASE_URL, else embedded).")]


def _keyring(settings: Settings) -> Keyring:
    from maxclaw.cli import fail
    from maxclaw.secrets.keyring import KeyringError, load_keyring

    try:
        keyring, _ = load_keyring(settings.secret_key, settings.secret_key_file,
                                  settings.data_dir)
    except KeyringError as exc:
        fail(exc.message)
    return keyring


@secrets_app.command("new-key")
def new_key() -> None:
    """Print a fresh key (for MAXCLAW_SECRET_KEY or a key file); nothing is stored."""
    from maxclaw.secrets.crypto import generate_key

    typer.echo(generate_key())


@secrets_app.command("keys")
def keys(database_url: DatabaseUrl = None,
         prune: Annotated[bool, typer.Option(
             "--prune", help="Remove old keys no live secret uses from the key file.")] = False,
         ) -> None:
    """List the keys (this keyring's and any the database still uses) with their row counts."""
    from maxclaw.cli import database, fail, migrate_or_fail, run_async
    from maxclaw.secrets import store
    from maxclaw.secrets.crypto import parse_key
    from maxclaw.secrets.keyring import key_file_texts, write_key_file

    settings = Settings()
    keyring = _keyring(settings)
    with database(settings, database_url) as (url, _):
        migrate_or_fail(url)

        async def work(services: Services) -> dict[str, int]:
            async with services.db.connection() as conn:
                usage: dict[str, int] = await store.key_usage(conn)
                return usage

        usage = run_async(url, work)
    primary = keyring.primary.id
    held = keyring.ids
    if prune:
        path = keyring.path
        if path is None:
            fail("the keys come from MAXCLAW_SECRET_KEY: drop unused ones there")
            return
        texts = key_file_texts(path)
        kept = [t for t in texts if (kid := parse_key(t).id) == primary or usage.get(kid, 0)]
        write_key_file(path, kept)
        held = [parse_key(t).id for t in kept]
    for kid in dict.fromkeys([*held, *usage]):
        typer.echo(json.dumps({"key_id": kid, "sealing": kid == primary, "held": kid in held,
                               "rows": usage.get(kid, 0)}))


@secrets_app.command("rotate")
def rotate(database_url: DatabaseUrl = None,
           resume: Annotated[bool, typer.Option(
               "--resume", help="Re-seal under the current first key; add no new key.")] = False,
           batch: Annotated[int, typer.Option("--batch", min=1, max=10_000)] = 200) -> None:
    """Add a new key at the top of the key file and re-seal every live secret under it, in
    batches, while servers run. Stopped halfway, run it again with --resume."""
    from maxclaw.cli import database, fail, migrate_or_fail, run_async
    from maxclaw.secrets.crypto import generate_key
    from maxclaw.secrets.keyring import key_file_texts, write_key_file
    from maxclaw.secrets.rotation import RotationReport
    from maxclaw.secrets.rotation import rotate as run_rotation

    settings = Settings()
    keyring = _keyring(settings)
    if not resume:
        path = keyring.path
        if path is None:
            fail("the keys come from MAXCLAW_SECRET_KEY: put a new key first there (make one "
                 "with `maxclaw secrets new-key`, keep the old one after a comma) on every "
                 "server, restart them, then run `maxclaw secrets rotate --resume`")
            return
        write_key_file(path, [generate_key(), *key_file_texts(path)])
        keyring.refresh(force=True)
        typer.echo(f"added key {keyring.primary.id} at the top of {keyring.path}; running "
                   "servers seal new secrets under it within a second", err=True)

    def progress(r: RotationReport) -> None:
        typer.echo(f"pass {r.passes}: {r.resealed} re-sealed in {r.batches} batches", err=True)

    with database(settings, database_url) as (url, _):
        migrate_or_fail(url)

        async def work(services: Services) -> RotationReport:
            report: RotationReport = await run_rotation(services.db, keyring, batch=batch,
                                                        progress=progress)
            return report

        report = run_async(url, work)
    old = {k: n for k, n in report.usage.items() if k != report.key_id}
    typer.echo(json.dumps({"key_id": report.key_id, "resealed": report.resealed,
                           "batches": report.batches, "passes": report.passes,
                           "unreadable": len(report.unreadable), "old_keys_in_use": old,
                           "keys_held": keyring.ids}))
    unused = [k for k in keyring.ids if k != report.key_id and not old.get(k)]
    if unused:
        typer.echo(f"no live secret uses {', '.join(unused)} any more: remove with "
                   "`maxclaw secrets keys --prune`", err=True)


@secrets_app.command("purge")
def purge(thread: Annotated[str, typer.Option("--thread", help="The thread's id.")],
          database_url: DatabaseUrl = None) -> None:
    """Destroy a thread's secrets now (the model then reads "[secret expired]")."""
    from maxclaw.auth.service import parse_uuid
    from maxclaw.cli import database, migrate_or_fail, run_async

    settings = Settings()
    with database(settings, database_url) as (url, _):
        migrate_or_fail(url)

        async def work(services: Services) -> int:
            n: int = await services.secrets.purge_thread(parse_uuid(thread))
            return n

        typer.echo(json.dumps({"purged": run_async(url, work)}))


@secrets_app.command("sweep")
def sweep(database_url: DatabaseUrl = None) -> None:
    """One retention pass (``serve`` runs it every sweep interval)."""
    from maxclaw.cli import database, migrate_or_fail, run_async

    settings = Settings()
    with database(settings, database_url) as (url, _):
        migrate_or_fail(url)

        async def work(services: Services) -> int:
            n: int = await services.secrets.sweep()
            return n

        typer.echo(json.dumps({"expired": run_async(url, work)}))
