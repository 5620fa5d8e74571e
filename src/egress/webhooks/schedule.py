"""The retry schedule of webhook deliveries.

The first attempt is made as soon as the event is committed. After the n-th failed
attempt of a round the next one waits ``schedule[n-1]`` seconds (the last delay
repeats): by default 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, … A delivery gives up
(state ``failed``) when its next attempt would begin more than ``give_up_after``
seconds (default 3 days) after the round began, i.e. after 12 attempts over about
2.8 days with the defaults. A replay starts a new round.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_SCHEDULE: tuple[float, ...] = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0)
DEFAULT_GIVE_UP_AFTER = 3 * 86400.0


def retry_delay(failures: int, schedule: Sequence[float]) -> float:
    """Seconds to wait after the ``failures``-th failed attempt of a round (1, 2, …)."""
    if not schedule:
        raise ValueError("the retry schedule needs at least one delay")
    return float(schedule[min(max(failures, 1), len(schedule)) - 1])


def next_retry(
    failures: int, age: float, schedule: Sequence[float], give_up_after: float
) -> float | None:
    """The delay before the next attempt, or None to give up.

    ``failures``: failed attempts in this round so far (including the one just made);
    ``age``: seconds since the round began."""
    delay = retry_delay(failures, schedule)
    return None if age + delay > give_up_after else delay


def attempt_offsets(schedule: Sequence[float], give_up_after: float) -> list[float]:
    """When each attempt of a round begins, in seconds after the event (sending takes
    no time here): the whole plan, for the docs and the tests."""
    offsets, at = [0.0], 0.0
    while (delay := next_retry(len(offsets), at, schedule, give_up_after)) is not None:
        at += delay
        offsets.append(at)
    return offsets
