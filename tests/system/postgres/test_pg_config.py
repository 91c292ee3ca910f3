"""The lease timings in the config (no server needed): ordered, named on error, restart-only."""

from __future__ import annotations

import pytest

from scheduler.core.config import parse_config
from scheduler.core.errors import UserError
from scheduler.daemon.process import restart_only_changes
from scheduler.state.lease import LeaseTimings


def test_defaults_are_ordered_and_reach_the_lease():
    t = LeaseTimings.of(parse_config("").daemon)
    assert (t.statement_timeout, t.renew, t.deadline, t.ttl) == (5, 10, 20, 30)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('lease_ttl = "10s"', "daemon.lease_ttl (line 3): daemon.lease_deadline (20s) must be"),
        ('lease_renew = "25s"', "daemon.lease_renew (line 3): daemon.lease_renew (25s) must be"),
        (
            'lease_statement_timeout = "10s"',
            "daemon.lease_statement_timeout (line 3): daemon.lease_statement_timeout (10s)",
        ),
    ],
)
def test_out_of_order_timings_name_the_key_and_line(text, where):
    with pytest.raises(UserError) as e:
        parse_config(f'[daemon]\nowner = "x"\n{text}\n', "sw.toml")
    assert str(e.value).startswith(f"sw.toml: {where}")
    assert "lease_statement_timeout < lease_renew < lease_deadline < lease_ttl" in str(e.value)


def test_lease_timings_need_a_restart():
    old = parse_config("")
    new = parse_config('[daemon]\nlease_ttl = "60s"\n')
    assert restart_only_changes(old, new) == ["daemon.lease_ttl"]
