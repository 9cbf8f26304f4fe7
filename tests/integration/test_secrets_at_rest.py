"""Secrets at rest on real PostgreSQL: retention (a moved clock, ``secrets purge``), a box that
does not open, keys that are wrong or too readable, and rotation while answers keep landing."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from maxclaw.app import create_app
from maxclaw.clock import FixedClock, SystemClock
from maxclaw.secrets.crypto import generate_key, parse_key
from maxclaw.secrets.keyring import KeyringError, key_file_texts, load_keyring, write_key_file
from maxclaw.secrets.service import missing_keys
from tests.cards import SECRET, new_thread, post_card
from tests.conftest import TEST_SECRET_KEY, Actor, Harness, app_settings
from tests.integration.test_cli import cli


async def answer_secret(a: Actor, tid: str, value: str) -> str:
    call_id, _ = await post_card(a.agent, tid, SECRET)
    cid = f"{call_id}:q3"
    resp = await a.user.post(f"/v1/components/{cid}/answer", json={"text": value})
    assert resp.status_code == 200, resp.text
    return cid


async def claim_text(a: Actor) -> str:
    """The model-facing text of a claim and of every older history page (the claim hands
    over only the model window; ``next_before_id`` reaches the rest)."""
    claim = await a.agent.post("/v1/agent/turns/claim", json={"wait_s": 0})
    assert claim.status_code == 200, claim.text
    texts, page = [claim.text], claim.json()
    while page["next_before_id"] is not None:
        older = await a.agent.get(f"/v1/agent/threads/{page['thread']['id']}/history",
                                  params={"before_id": page["next_before_id"]})
        assert older.status_code == 200, older.text
        texts.append(older.text)
        page = {**older.json(), "thread": page["thread"]}
    return "\n".join(texts)


async def secret_rows(h: Harness) -> list[dict[str, Any]]:
    async with h.services.db.connection() as conn:
        return [dict(r) for r in await conn.fetch(
            "SELECT message_id, kind, state, key_id, box, expires_at FROM message_secrets"
            " ORDER BY message_id")]


async def test_ttl_destroys_the_plaintext_and_the_model_reads_the_expiry(
        harness: Harness) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    planted = "sk-ttl-5b1d0c9e77aa"
    started = SystemClock().now()
    cid = await answer_secret(a, tid, planted)
    echo = await a.agent.post(f"/v1/agent/threads/{tid}/messages", json={
        "role": "assistant", "content": f"Using {planted} for the deploy."})
    assert echo.status_code == 201, echo.text
    rows = await secret_rows(harness)
    assert [(r["kind"], r["state"]) for r in rows] == [("answer", "sealed"), ("echo", "sealed")]
    # the default retention: seven days from the answer; the echo expires with its secret
    ttl = rows[0]["expires_at"] - started
    assert timedelta(days=7) <= ttl < timedelta(days=7, minutes=1)
    assert rows[1]["expires_at"] == rows[0]["expires_at"]

    secrets = harness.services.secrets
    assert await secrets.sweep() == 0  # nothing is due yet
    secrets.clock = FixedClock(started + timedelta(days=7, minutes=1))
    assert await secrets.sweep() == 2
    rows = await secret_rows(harness)
    assert all(r["state"] == "expired" and r["box"] is None and r["key_id"] is None
               for r in rows)
    text = await claim_text(a)
    assert planted not in text
    assert "Secret answer: [secret expired]" in text
    assert "Using [secret expired] for the deploy." in text
    # the card still says it was answered
    component = (await a.user.get(f"/v1/components/{cid}")).json()
    assert component["status"] == "answered" and component["answer"]["hidden"] is True


async def test_purge_destroys_a_threads_secrets_at_once(harness: Harness, database_url: str,
                                                        tmp_path: Path) -> None:
    a = await harness.actor("max")
    tid, other = await new_thread(a.user), await new_thread(a.user, title="Other")
    await answer_secret(a, tid, "sk-purge-0a9f3c2e11")
    await answer_secret(a, other, "sk-kept-7e6d5c4b3a")
    run = await cli("secrets", "purge", "--thread", tid, "--database-url", database_url,
                    env={"MAXCLAW_SECRET_KEY": TEST_SECRET_KEY}, data_dir=tmp_path)
    run.assert_ok()
    assert json.loads(run.out) == {"purged": 1}
    assert [r["state"] for r in await secret_rows(harness)] == ["expired", "sealed"]
    texts = [await claim_text(a), await claim_text(a)]
    assert any("Secret answer: [secret expired]" in t for t in texts)
    assert any("sk-kept-7e6d5c4b3a" in t for t in texts)
    assert not any("sk-purge-0a9f3c2e11" in t for t in texts)
    missing = await cli("secrets", "purge", "--thread", tid.replace(tid[:8], "00000000"),
                        "--database-url", database_url, data_dir=tmp_path)
    assert "No such thread" in missing.assert_one_line_error()


async def test_a_truncated_box_reads_unavailable_and_is_logged_without_content(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    await answer_secret(a, tid, "sk-broken-91c0ffee42")
    await answer_secret(a, tid, "sk-intact-3d2c1b0a99")
    first = (await secret_rows(harness))[0]
    async with harness.services.db.connection() as conn:
        await conn.execute("UPDATE message_secrets SET box = substring(box FROM 1 FOR 20)"
                           " WHERE message_id = $1", first["message_id"])
    text = await claim_text(a)
    assert "Secret answer: [secret unavailable]" in text
    assert "sk-intact-3d2c1b0a99" in text and "sk-broken-91c0ffee42" not in text
    logged = [r for r in caplog.records if r.name == "maxclaw.secrets"]
    assert logged and all(getattr(r, "message_id", None) == first["message_id"] for r in logged)
    assert "sk-broken" not in caplog.text and "sk-intact" not in caplog.text


async def test_serve_refuses_a_wrong_key_in_one_line(harness: Harness, database_url: str,
                                                     tmp_path: Path) -> None:
    a = await harness.actor("max")
    await answer_secret(a, await new_thread(a.user), "sk-wrongkey-77aa00bb")
    wrong = generate_key()
    run = await cli("serve", "--database-url", database_url,
                    env={"MAXCLAW_SECRET_KEY": wrong}, data_dir=tmp_path)
    line = run.assert_one_line_error()
    assert parse_key(TEST_SECRET_KEY).id in line and "(1 rows)" in line
    assert parse_key(wrong).id in line and wrong not in line
    # with no key at all, serve on an external database refuses too (no silent empty answers)
    none = await cli("serve", "--database-url", database_url, data_dir=tmp_path)
    assert "no secret key" in none.assert_one_line_error()


async def test_a_key_file_others_can_read_is_refused(database_url: str, tmp_path: Path) -> None:
    key_file = tmp_path / "keys" / "secret.key"
    write_key_file(key_file, [generate_key()])
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    load_keyring(None, key_file, tmp_path)  # owner-only: fine
    key_file.chmod(0o644)
    with pytest.raises(KeyringError, match="chmod 600"):
        load_keyring(None, key_file, tmp_path)
    for args in (("serve",), ("secrets", "keys")):
        run = await cli(*args, "--database-url", database_url,
                        env={"MAXCLAW_SECRET_KEY_FILE": str(key_file)}, data_dir=tmp_path)
        line = run.assert_one_line_error()
        assert "mode 0644" in line and f"chmod 600 {key_file}" in line


async def test_the_embedded_first_run_creates_an_owner_only_key_file(tmp_path: Path) -> None:
    keyring, created = load_keyring(None, None, tmp_path, create=True)
    assert created == tmp_path / "secret.key"
    assert stat.S_IMODE(created.stat().st_mode) == 0o600
    again, created_again = load_keyring(None, None, tmp_path, create=True)
    assert created_again is None and again.primary.id == keyring.primary.id


@pytest.mark.timeout(240)
async def test_rotation_while_answers_keep_landing(database_url: str, tmp_path: Path) -> None:
    """``secrets rotate`` (a subprocess, batches of 5) while the in-process app answers more
    secret cards; afterwards every secret opens, all under the new key; the old key is then
    pruned from the file and everything still opens."""
    key_file = tmp_path / "secret.key"
    write_key_file(key_file, [TEST_SECRET_KEY])
    old_id = parse_key(TEST_SECRET_KEY).id
    app = create_app(app_settings(database_url, secret_key=None, secret_key_file=key_file))
    async with app.router.lifespan_context(app):
        h = Harness(app=app, services=app.state.services,
                    client=httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                             base_url="http://test"))
        a = await h.actor("max")
        tid = await new_thread(a.user)
        planted = [f"sk-rot-before-{i:03d}-c0ffee" for i in range(40)]
        for value in planted:
            await answer_secret(a, tid, value)
        assert {r["key_id"] for r in await secret_rows(h)} == {old_id}
        during: list[str] = []
        stop = asyncio.Event()

        async def load() -> None:
            while not stop.is_set():
                value = f"sk-rot-during-{len(during):03d}-beef"
                await answer_secret(a, tid, value)
                during.append(value)

        env = {"MAXCLAW_SECRET_KEY_FILE": str(key_file)}
        loader = asyncio.create_task(load())
        try:
            run = await cli("secrets", "rotate", "--batch", "5", "--database-url", database_url,
                            env=env, data_dir=tmp_path)
        finally:
            stop.set()
            await loader
        run.assert_ok()
        report = json.loads(run.out)
        new_id = report["key_id"]
        assert new_id != old_id and report["unreadable"] == 0
        assert report["resealed"] >= len(planted) and report["old_keys_in_use"] == {}
        assert during, "no answer landed while rotate ran"
        assert f"no live secret uses {old_id}" in run.err
        after = "sk-rot-after-000-f00d"
        await answer_secret(a, tid, after)
        rows = await secret_rows(h)
        assert len(rows) == len(planted) + len(during) + 1
        assert {r["key_id"] for r in rows} == {new_id}
        # the old key is listed until pruned; then the file holds only the new one
        listed = [json.loads(line) for line in (await cli(
            "secrets", "keys", "--database-url", database_url, env=env,
            data_dir=tmp_path)).out.splitlines()]
        assert {k["key_id"]: k["rows"] for k in listed} == {new_id: len(rows), old_id: 0}
        (await cli("secrets", "keys", "--prune", "--database-url", database_url, env=env,
                   data_dir=tmp_path)).assert_ok()
        assert [parse_key(t).id for t in key_file_texts(key_file)] == [new_id]
        h.services.secrets.keyring.refresh(force=True)
        assert h.services.secrets.keyring.ids == [new_id]
        text = await claim_text(a)
        missing = [v for v in (*planted, *during, after) if v not in text]
        assert not missing, missing[:5]
        await h.client.aclose()
    assert os.stat(key_file).st_mode & 0o077 == 0


async def test_plaintext_answers_from_before_0005_are_sealed_at_start(
        harness: Harness, database_url: str) -> None:
    a = await harness.actor("max")
    tid = await new_thread(a.user)
    body = 'Answer to "Deploy" (question card old:q3 in a message above)\nSecret answer: sk-old-1'
    async with harness.services.db.connection() as conn:
        await conn.execute(
            "INSERT INTO messages (user_id, thread_id, role, body, sensitive, source_meta)"
            " VALUES ($1::uuid, $2::uuid, 'user', $3, true, $4::jsonb)", a.user_id, tid, body,
            {"componentAnswer": {"componentId": "old:q3", "answeredBy": "max", "via": "card"}})
        await conn.execute("INSERT INTO turns (user_id, thread_id) VALUES ($1::uuid, $2::uuid)",
                           a.user_id, tid)
    keyring = harness.services.secrets.keyring
    assert await missing_keys(database_url, keyring) == (None, True)
    assert await harness.services.secrets.seal_legacy() == 1
    assert await missing_keys(database_url, keyring) == (None, False)
    async with harness.services.db.connection() as conn:
        stored = await conn.fetchval("SELECT body FROM messages WHERE thread_id = $1::uuid", tid)
    assert stored.endswith("Secret answer: ••••[card old:q3]") and "sk-old-1" not in stored
    assert "Secret answer: sk-old-1" in await claim_text(a)
