from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler.core.budget import (
    BudgetRule,
    Spend,
    Window,
    max_affordable_price,
    must_stop,
    spent_in_window,
    status,
    window_start,
)

NOW = datetime(2026, 3, 18, 15, 30, tzinfo=UTC)  # a Wednesday


def test_windows():
    assert window_start(Window.DAY, NOW) == datetime(2026, 3, 18, tzinfo=UTC)
    assert window_start(Window.WEEK, NOW) == datetime(2026, 3, 16, tzinfo=UTC)
    assert window_start(Window.MONTH, NOW) == datetime(2026, 3, 1, tzinfo=UTC)
    assert window_start(Window.TOTAL, NOW) is None


def test_spend_counts_only_the_window_and_scope():
    rule = BudgetRule("ml", "team:ml", 100, Window.DAY)
    spends = [
        Spend("a", "ml", 2.0, NOW - timedelta(hours=20), NOW - timedelta(hours=14)),  # 1.5h today
        Spend("b", "ml", 1.0, NOW - timedelta(hours=1), None),  # running
        Spend("c", "other", 9.0, NOW - timedelta(hours=1), None),
    ]
    assert spent_in_window(rule, spends, NOW) == pytest.approx(2.0 * 1.5 + 1.0)
    assert BudgetRule("j", "job:c", 1).applies_to("c", "other")
    st = status(rule, spends, NOW)
    assert st.burn_per_hour == 1.0 and st.headroom == pytest.approx(96.0)


def test_affordable_price_and_stop():
    rule = BudgetRule("ml", "team:ml", 10, Window.TOTAL)
    st = status(rule, [Spend("a", "ml", 4.0, NOW - timedelta(hours=2), None)], NOW)  # $8 spent
    price, name = max_affordable_price([st], "x", "ml", hold_hours=0.5)
    # room after the running job's next half hour: 10 - 8 - 2 = 0
    assert name == "ml" and price == pytest.approx(0.0)
    assert must_stop(st, hold_hours=0.6)
    assert not must_stop(st, hold_hours=0.4)
    assert max_affordable_price([st], "x", "other-team", 0.5) == (None, "")
    soft = status(BudgetRule("s", "global", 1, hard=False), [], NOW)
    assert max_affordable_price([soft], "x", "ml", 0.5) == (None, "")
