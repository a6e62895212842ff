"""The test harness's own arithmetic: waiting out the end of a UTC day."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.harness import wait_before_day_end


def test_a_module_started_near_midnight_waits_until_just_past_it() -> None:
    assert wait_before_day_end(datetime(2026, 11, 24, 23, 58, 30, tzinfo=UTC), 300) == 91.0
    assert wait_before_day_end(datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC), 300) == 2.0


def test_a_module_with_time_to_spare_does_not_wait() -> None:
    assert wait_before_day_end(datetime(2026, 11, 24, 23, 55, tzinfo=UTC), 300) == 0.0
    assert wait_before_day_end(datetime(2026, 11, 25, 0, 0, 1, tzinfo=UTC), 300) == 0.0
