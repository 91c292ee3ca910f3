"""`spotwise report` against an API server: the server's report document, printed as JSON as
it came, or as the same table the local report prints (its rows rebuilt as the attributes
that table reads). The HTML report's plots need the whole ledger: it is written on the
daemon's host.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from scheduler.cli.common import print_json
from scheduler.cli.remote import Remote, with_times


def _row(r: dict[str, Any], key: str) -> SimpleNamespace:
    return SimpleNamespace(
        key=key,
        name=r.get("name", ""),
        team=r.get("team", ""),
        budgets=r.get("budgets") or [],
        **{
            k: r[k]
            for k in (
                "cost_usd", "ondemand_usd", "savings_usd", "savings_pct", "interruptions",
                "hours", "lost_hours", "gpu_hours",
            )
        },
    )  # fmt: skip


def print_remote_report(
    api: Remote,
    by: str,
    since: str | None,
    until: str | None,
    html: bool,
    as_json: bool,
    print_table: Callable[[Any], None],
) -> None:
    """The report from `api`: JSON as it came, or the table `print_table` (the local
    report's own) draws."""
    from scheduler.core.errors import UserError

    if html:
        raise UserError(
            "report --html draws from the whole spend ledger: run it on the daemon's host "
            "(the dashboard's report page shows the same table)"
        )
    query = {"by": by, "since": since or "", **({"until": until} if until else {})}
    doc = api.get("/report", query)
    if as_json:
        print_json(doc)
        return
    d = with_times(doc)
    print_table(
        SimpleNamespace(
            by=by,
            window=SimpleNamespace(start=d["window"]["start"], end=d["window"]["end"]),
            rows=[_row(r, str(r[by])) for r in d["rows"]],
            total=_row(d["total"], "total"),
            notes=d["notes"],
        )
    )
