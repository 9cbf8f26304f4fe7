"""Issue 34, finding 1: masking a row costs its size, not its size times the thread's secrets.

The issue's worst case: a whole-card answer with 8 secret questions posted 32 times in one
thread (1,290 search patterns), then one 1 MiB tool row of 330,000 empty strings. Before, the
echo check searched every pattern in every string: 13 s on the event loop. The check is timed
against writing the same row out as JSON once (what storing it costs anyway), measured
interleaved on the same machine, so a busy machine slows both alike.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest

from maxclaw.clock import SystemClock
from maxclaw.errors import Invalid
from maxclaw.secrets.keyring import load_keyring
from maxclaw.secrets.mask import MAX_STRINGS
from maxclaw.secrets.rows import SecretRow
from maxclaw.secrets.service import SecretService

USER = "00000000-0000-0000-0000-000000000001"
THREAD = "00000000-0000-0000-0000-000000000002"
CARD_SECRETS = 8
POSTS = 32
EMPTY_STRINGS = 330_000


def service(tmp_path: Path) -> SecretService:
    secrets = SecretService(None, SystemClock(), secret_key=None,  # type: ignore[arg-type]
                            key_file=None, data_dir=tmp_path, ttl=timedelta(days=1))
    secrets.use(load_keyring(None, None, tmp_path, create=True)[0])
    return secrets


def live_rows(secrets: SecretService, posts: int = POSTS) -> list[SecretRow]:
    """``posts`` whole-card answers of ``CARD_SECRETS`` secrets each, newest first (as the
    live-secrets read returns them); every post's secrets are new values."""
    rows = []
    for n in reversed(range(posts)):
        pairs = [(f"hunter-{n}-{q}-pa$$ w\"rd", f"call{n}:q{q}") for q in range(CARD_SECRETS)]
        sealed = secrets.seal_card_answer(USER, THREAD, pairs, "answers")
        rows.append(SecretRow(n + 1, USER, THREAD, "answer", sealed.component_id,
                              sealed.key_id, sealed.box, "sealed", sealed.expires_at))
    return rows


def test_a_mib_of_empty_strings_costs_about_one_json_pass(tmp_path: Path) -> None:
    secrets = service(tmp_path)
    live = live_rows(secrets)
    content = [""] * EMPTY_STRINGS
    assert len(json.dumps(content)) >= 1024 * 1024
    guard, reference = [], []
    for _ in range(5):  # interleaved pairs: the machine's load weighs on both of a pair alike
        began = time.perf_counter()
        json.dumps({"content": content})
        reference.append(time.perf_counter() - began)
        began = time.perf_counter()
        out = secrets.guard_rows(live, USER, THREAD, body=None, content=content)
        guard.append(time.perf_counter() - began)
        assert out.sealed is None and out.content == json.dumps(content)
    pairs = [f"{g * 1000:.1f}/{r * 1000:.1f}" for g, r in zip(guard, reference, strict=True)]
    print(f"\nguard/one json.dumps, ms: {', '.join(pairs)}")
    # the target is 50 ms per MiB; a JSON pass is 12-40 ms here, and the check is at most a
    # few (1.3-1.4x when quiet). Judged within a pair, never across pairs: under make test's
    # load one lucky 12 ms reference beside guards of 81-158 ms failed a min-against-min
    # comparison (2026-12-07), while two of its three pairs stayed within 1.4x. The bug this
    # guards against was 13 s, ~300x, in every pair.
    assert any(g < 4 * r + 0.02 for g, r in zip(guard, reference, strict=True)), pairs


def test_a_row_repeating_a_secret_is_still_masked_wherever_it_is(tmp_path: Path) -> None:
    secrets = service(tmp_path)
    live = live_rows(secrets, posts=2)
    newest, oldest = "hunter-1-3-pa$$ w\"rd", "hunter-0-7-pa$$ w\"rd"
    content = {"k": ["x", f"a {newest} b"], f"key {oldest}": json.dumps({"pw": newest})}
    out = secrets.guard_rows(live, USER, THREAD, body=f"say {oldest}", content=content,
                             tool_calls=[{"id": "c", "name": "f", "arguments": {"q": newest}}])
    assert out.sealed is not None
    assert out.body == "say ••••[card call0:q7]"
    assert out.content == {"k": ["x", "a ••••[card call1:q3] b"],
                           "key ••••[card call0:q7]": '{"pw": "••••[card call1:q3]"}'}
    assert out.tool_calls == [{"id": "c", "name": "f",
                               "arguments": {"q": "••••[card call1:q3]"}}]
    assert out.components == ("call0:q7", "call1:q3")


def test_a_row_repeating_a_secret_among_too_many_strings_is_refused(tmp_path: Path) -> None:
    secrets = service(tmp_path)
    live = live_rows(secrets, posts=1)
    content = [""] * MAX_STRINGS + ["hunter-0-0-pa$$ w\"rd"]
    with pytest.raises(Invalid):
        secrets.guard_rows(live, USER, THREAD, body=None, content=content)
    # the same many strings without a secret are simply stored
    assert secrets.guard_rows(live, USER, THREAD, body=None, content=content[:-1]).sealed is None
