"""``json_ready`` returns what ``jsonable_encoder`` returns, for plain JSON values and for
values with parts it has to convert."""

from __future__ import annotations

import enum
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.encoders import jsonable_encoder

from maxclaw.api.encode import json_ready


class Colour(enum.StrEnum):
    RED = "red"


class Tag(str):
    pass


PLAIN: list[Any] = [
    None, True, 0, -7, 2**70, 1.5, 1e16, "", "naïve \u2028 \x00",
    {"a": [1, {"b": None}], "c": "x"}, [[], {}], {"messages": [{"id": 1, "body": "hi"}] * 3},
]
CONVERTED: list[Any] = [
    (1, 2), {"t": datetime(2026, 12, 1, tzinfo=UTC)}, [uuid.UUID(int=5)], {"c": Colour.RED},
    {1: "int key"}, {"s": {1, 2}}, [Tag("sub")], {"nested": [{"when": datetime(2026, 1, 1)}]},
    {"_sa_state": 1, "kept": 2}, {"turn": {"lease_until": datetime(2026, 1, 1, tzinfo=UTC)},
                                  "messages": [{"id": 1}]}, {Tag("k"): 1},
]


@pytest.mark.parametrize("value", PLAIN)
def test_a_plain_value_is_returned_equal(value: Any) -> None:
    assert json_ready(value) == value == jsonable_encoder(value)
    assert json.dumps(json_ready(value)) == json.dumps(jsonable_encoder(value))


@pytest.mark.parametrize("value", CONVERTED)
def test_anything_else_is_converted_as_jsonable_encoder_does(value: Any) -> None:
    got = json_ready(value)
    assert got == jsonable_encoder(value)
    assert json.dumps(got) == json.dumps(jsonable_encoder(value))
