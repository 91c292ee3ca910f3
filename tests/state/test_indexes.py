"""The queries an idle daemon runs every pass read through indexes, so their cost does not
grow with the finished history a long-lived database holds."""

from __future__ import annotations

import sqlalchemy as sa
from sqlmodel import Session

from scheduler.daemon.controllers import spend
from scheduler.state.db import open_db


def test_the_accrual_reads_unaccrued_attempts_through_the_partial_index(tmp_path):
    engine = open_db(f"sqlite:///{tmp_path}/db.sqlite")  # the migrations build the index
    plans: list[str] = []

    @sa.event.listens_for(engine, "before_cursor_execute")
    def explain(conn, cursor, statement, params, context, many):
        if statement.lstrip().upper().startswith("SELECT") and "FROM attempt" in statement:
            rows = conn.connection.execute("EXPLAIN QUERY PLAN " + statement, params)
            plans.append(" | ".join(str(r[-1]) for r in rows))

    with Session(engine) as s:
        assert spend._to_accrue(s) == []
    assert len(plans) == 2, plans
    assert all("SCAN attempt" not in p or "USING INDEX" in p for p in plans), plans
    assert any("ix_attempt_unaccrued" in p for p in plans), plans
