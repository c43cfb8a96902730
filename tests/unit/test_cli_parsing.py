"""The CLI's parsing of durations, times and JSON arguments, and its duration display; no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from pgsched.cli.common import first_line, parse_duration, parse_json_object, parse_timestamp, split_csv
from pgsched.cli.stats import format_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30),
        ("0", 0),
        ("2.5", 2.5),
        ("30s", 30),
        ("5m", 300),
        ("2h", 7200),
        ("1d", 86400),
        ("1w", 604800),
        ("500ms", 0.5),
        ("1h30m", 5400),
        ("1d2h3m4s", 93784),
        ("1.5h", 5400),
        (" 5M ", 300),
        ("1h 30m", 5400),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "5x", "-5m", "m", "5 minutes", "1e3", "nan", "inf", "5m-", "h1", "1..5s"])
def test_bad_durations_say_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a duration: use e\.g\. 30s, 5m"):
        parse_duration(text)


def test_an_absurd_duration_is_refused_not_a_crash() -> None:
    with pytest.raises(ValueError, match="too long a duration"):
        parse_duration("99999999999w")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2030-01-31T09:00:00+01:00", datetime(2030, 1, 31, 8, 0, tzinfo=UTC)),
        ("2030-01-31T08:00:00Z", datetime(2030, 1, 31, 8, 0, tzinfo=UTC)),
        ("2030-01-31 08:00", datetime(2030, 1, 31, 8, 0, tzinfo=UTC)),
        ("2030-01-31", datetime(2030, 1, 31, tzinfo=UTC)),
    ],
)
def test_timestamps_without_an_offset_are_utc(text: str, expected: datetime) -> None:
    parsed = parse_timestamp(text)

    assert parsed == expected
    assert parsed.tzinfo is not None


def test_a_timestamp_keeps_its_offset() -> None:
    assert parse_timestamp("2030-01-31T09:00:00-05:00").utcoffset() == timezone(timedelta(hours=-5)).utcoffset(None)


@pytest.mark.parametrize("text", ["tomorrow", "2030-13-01", "31/01/2030", ""])
def test_bad_timestamps(text: str) -> None:
    with pytest.raises(ValueError, match="is not an ISO 8601 time"):
        parse_timestamp(text)


def test_json_objects() -> None:
    assert parse_json_object('{"user_id": 42, "tags": ["a"], "nested": {"x": null}}') == {
        "user_id": 42,
        "tags": ["a"],
        "nested": {"x": None},
    }
    assert parse_json_object("{}") == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{bad", "not valid JSON"),
        ("", "not valid JSON"),
        ('{"x": NaN}', "NaN is not valid JSON"),
        ('{"x": Infinity}', "Infinity is not valid JSON"),
        ("[1]", "not an array"),
        ('"s"', "not a string"),
        ("1.5", "not a number"),
        ("true", "not a boolean"),
        ("null", "not null"),
    ],
)
def test_json_that_is_not_an_object(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_json_object(text)


def test_split_csv_and_first_line() -> None:
    assert split_csv(" a, b,,c ,") == ["a", "b", "c"]
    assert split_csv(None) == []
    assert first_line("\n  ValueError: x\nTraceback ...") == "ValueError: x"
    assert first_line(None) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, ""),
        (0.0, "0ms"),
        (0.0424, "42ms"),
        (4.25, "4.2s"),
        (0.9996, "1.0s"),
        (59.94, "59.9s"),
        (59.96, "1m00s"),
        (-2.5, "-2.5s"),
        (60, "1m00s"),
        (185, "3m05s"),
        (7260, "2h01m"),
        (273600, "3d04h"),
    ],
)
def test_format_seconds(seconds: float | None, text: str) -> None:
    assert format_seconds(seconds) == text
