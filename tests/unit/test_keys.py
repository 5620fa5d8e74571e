"""Cursor keys survive a trip through JSON with their exact Python type and value."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math

import pytest

from egress.domain.keys import decode_key, decode_value, encode_key, encode_value

VALUES = [
    True, False, 0, 1, -1, 2**63 - 1, -(2**63), 2**200, 0.0, -0.0, 0.1, 1 / 3, 5e-324,
    1.7976931348623157e308, float("inf"), float("-inf"),
    decimal.Decimal("0"), decimal.Decimal("-12.3400"), decimal.Decimal("1E+30"),
    decimal.Decimal("123456789012345678901234567890.123456789"),
    "", "plain", "é日本🎉\u2028", "\x00\x01\r\n\"'\\", b"", bytes(range(256)),
    dt.datetime(2024, 2, 29, 12, 34, 56, 789012),
    dt.datetime(2024, 2, 29, 12, 34, 56, tzinfo=dt.UTC),
    dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-5, minutes=-30))),
    dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.time(0, 0), dt.time(23, 59, 59, 999999),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: f"{type(v).__name__}:{v!r}"[:40])
def test_value_round_trip_keeps_type_and_value(value: object) -> None:
    back = decode_value(json.loads(json.dumps(encode_value(value))))
    assert type(back) is type(value)
    assert back == value
    if isinstance(value, float):
        assert math.copysign(1, back) == math.copysign(1, value)  # -0.0 stays negative
    if isinstance(value, decimal.Decimal):
        assert str(back) == str(value)  # the exponent (trailing zeros) is kept
    if isinstance(value, dt.datetime | dt.time):
        assert back.utcoffset() == value.utcoffset()


def test_nan_round_trips() -> None:
    back = decode_value(json.loads(json.dumps(encode_value(float("nan")))))
    assert isinstance(back, float) and math.isnan(back)


def test_bool_is_not_taken_for_int() -> None:
    assert encode_value(True) == ["bool", "1"]
    assert encode_value(1) == ["int", "1"]


def test_key_round_trip() -> None:
    key = (42, "a b", b"\xff", dt.date(2024, 1, 1))
    assert decode_key(json.loads(json.dumps(encode_key(key)))) == key
    assert encode_key(None) is None and decode_key(None) is None


def test_unsupported_type_is_refused() -> None:
    with pytest.raises(TypeError, match="cannot use a value of type list"):
        encode_value([1, 2])
