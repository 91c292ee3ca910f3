"""A reconcile pass costs a constant number of transactions, not a few per job, and batching
keeps every per-job guarantee: one bad job is isolated, placement decides the same."""

from __future__ import annotations

import json
import random
from datetime import timedelta
from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlmodel import Session, select

from providers.base import EndReason, Market
from scheduler.core.catalog import Catalog
from scheduler.core.jobspec import SpotPreference, parse_gpu
from scheduler.core.placement import Candidates, PlacementContext, Requirements, place
from scheduler.core.states import JobState
from scheduler.daemon.controllers.job.ends import AttemptEnds
from scheduler.daemon.controllers.job.writes import DecisionWriter
from scheduler.state import read_models
from scheduler.state.read_connection import open_for_reading
from tests.support.fakes import NOW, offering


def _count_writes(w, monkeypatch) -> list[int]:
    calls = [0]
    real = w.rec.db.write

    def counting():
        calls[0] += 1
        return real()

    monkeypatch.setattr(w.rec.db, "write", counting)
    return calls


@pytest.mark.slow
def test_a_pass_over_many_jobs_writes_in_a_few_transactions(make_world, monkeypatch):
    w = make_world()
    ids = [w.submit(name=f"j{i}", gpus="V100:1") for i in range(60)]
    calls = _count_writes(w, monkeypatch)
    w.clock.advance(5)
    w.rec.reconcile()
    assert all(w.job(j).state is JobState.RUNNING for j in ids)
    assert all(len(w.attempts(j)) == 1 for j in ids)  # one intent each, never two
    launching = w.events("launching")
    assert sorted(e.job_id for e in launching) == sorted(ids)
    # Per job this was three or more; batched it does not grow with the jobs.
    assert calls[0] <= 8, calls[0]
    steady = calls[0]
    w.clock.advance(5)
    w.rec.reconcile()
    assert calls[0] - steady <= 4  # nothing changed: almost nothing to write


def test_a_job_whose_write_fails_is_isolated_from_its_batch(make_world, monkeypatch):
    w = make_world(backoff_base="60s")
    bad = w.submit(name="bad", gpus="V100:1")
    good = [w.submit(name=f"good{i}", gpus="V100:1") for i in range(5)]
    real = DecisionWriter._intent_row

    def broken(self, job, it):
        if job.id == bad:
            raise RuntimeError("disk says no")
        return real(self, job, it)

    monkeypatch.setattr(DecisionWriter, "_intent_row", broken)
    w.tick()
    assert all(w.job(j).state is JobState.RUNNING for j in good)
    job = w.job(bad)
    assert job.state is JobState.PENDING and job.step_failures == 1 and not w.attempts(bad)
    assert [e.job_id for e in w.events("step_failed")] == [bad]


@pytest.mark.slow
def test_a_wave_of_endings_is_recorded_and_acted_on_in_a_few_transactions(make_world, monkeypatch):
    """60 instances interrupted at once (a zone reclaimed): one pass records every end and
    writes every job's next state in a handful of commits (it was two per job), and each
    job is RECOVERING with its attempt billed up to the end and its pool's interruption counted."""
    from scheduler.core.states import AttemptEnd
    from scheduler.state.models import PoolState

    w = make_world()
    ids = [w.submit(name=f"j{i}", gpus="V100:1") for i in range(60)]
    w.tick()
    assert all(w.job(j).state is JobState.RUNNING for j in ids)
    for inst in w.provider.running():
        w.provider.end(inst.id, EndReason.INTERRUPTED)
    calls = _count_writes(w, monkeypatch)
    w.clock.advance(5)
    w.rec.reconcile()
    assert calls[0] <= 10, calls[0]
    for j in ids:
        first = w.attempts(j)[0]
        assert first.end_reason is AttemptEnd.INTERRUPTED and first.ended_at is not None
        assert w.job(j).recoveries == 1
    assert len(w.events("recovering")) == 60 and len(w.events("attempt_interrupted")) == 60
    with Session(w.rec.engine) as s:
        pools = {p.pool: p.interruptions for p in s.exec(select(PoolState)).all()}
    assert sum(pools.values()) == 60


@pytest.mark.slow
def test_one_attempt_that_cannot_be_recorded_leaves_its_batch_recorded(make_world, monkeypatch):
    """The batch that holds a bad attempt is written again one by one: the others end and
    their jobs take their next state this pass; the bad one is retried (and ends) on a
    later pass."""
    from scheduler.core.states import AttemptState
    from scheduler.daemon.controllers.instances import InstanceController

    w = make_world()
    ids = [w.submit(name=f"j{i}", gpus="V100:1") for i in range(6)]
    w.tick()
    for inst in w.provider.running():
        w.provider.end(inst.id, EndReason.EXITED, exit_code=0)
    bad = w.attempts(ids[2])[0].id
    real = InstanceController._end

    def broken(self, s, a, *args, **kw):
        if a.id == bad:
            raise RuntimeError("disk says no")
        return real(self, s, a, *args, **kw)

    monkeypatch.setattr(InstanceController, "_end", broken)
    w.tick()
    states = {j: w.job(j).state for j in ids}
    assert [j for j, st in states.items() if st is not JobState.SUCCEEDED] == [ids[2]]
    assert w.attempts(ids[2])[0].state is not AttemptState.ENDED
    monkeypatch.setattr(InstanceController, "_end", real)
    w.tick()
    assert w.job(ids[2]).state is JobState.SUCCEEDED


def test_a_job_whose_next_state_fails_in_its_batch_gets_it_alone(make_world, monkeypatch, caplog):
    """A next state that fails to be written in the batch is retried in the job's own step,
    whose failure is that job's alone (backed off, counted); every other job of the batch
    takes its next state."""
    w = make_world(backoff_base="60s")
    ids = [w.submit(name=f"j{i}", gpus="V100:1") for i in range(5)]
    w.tick()
    for inst in w.provider.running():
        w.provider.end(inst.id, EndReason.EXITED, exit_code=0)
    real = AttemptEnds._write_next_state

    def broken(self, s, job, last, now, progress=None):
        if job.id == ids[1]:
            raise RuntimeError("disk says no")
        return real(self, s, job, last, now, progress)

    monkeypatch.setattr(AttemptEnds, "_write_next_state", broken)
    w.tick()
    assert [j for j in ids if w.job(j).state is not JobState.SUCCEEDED] == [ids[1]]
    # The operator reads why the batch was split, in one line.
    assert "writing the next state of 5 jobs together failed (disk says no)" in caplog.text
    job = w.job(ids[1])
    assert job.step_failures == 1 and [e.job_id for e in w.events("step_failed")] == [ids[1]]
    monkeypatch.setattr(AttemptEnds, "_write_next_state", real)
    w.tick(61)
    assert w.job(ids[1]).state is JobState.SUCCEEDED


def test_the_pass_memo_never_changes_a_decision():
    rng = random.Random(7)
    offers = []
    for zone in ("us-east-1a", "us-east-1b", "us-west-2a"):
        for gpu, count, price in (("V100", 1, 0.9), ("A100", 8, 11.0), ("T4", 1, 0.2)):
            offers.append(offering(zone, f"{gpu}.x", gpu, count, price * rng.uniform(0.8, 1.2)))
            offers.append(offering(zone, f"{gpu}.x", gpu, count, price * 3, Market.ON_DEMAND))
    cat = Catalog(offers)
    memo = Candidates(cat)
    reqs = [
        Requirements(gpus=(parse_gpu("V100:1"),)),
        Requirements(gpus=(parse_gpu("A100:8"),), max_price_per_hour=12.0),
        Requirements(gpus=(parse_gpu("any:1"),), spot=SpotPreference.NEVER),
        Requirements(gpus=(parse_gpu("T4:1"),), regions=frozenset({"us-west-2"})),
        Requirements(gpus=(parse_gpu("H100:8"),)),
    ]
    pools = [o.pool for o in offers]
    for _ in range(300):
        req = rng.choice(reqs)
        ctx = PlacementContext(
            now=NOW,
            unavailable={p: NOW + timedelta(minutes=1) for p in rng.sample(pools, 2)},
            avoid_pools=frozenset(rng.sample(pools, rng.randint(0, 3))),
            max_affordable_price=rng.choice([None, 0.5, 1.0, 20.0]),
            budget_name="b",
            remaining_gpu_hours=rng.choice([None, 4.0]),
            markets=rng.choice([None, frozenset({Market.SPOT}), frozenset({Market.ON_DEMAND})]),
        )
        assert place(req, cat, ctx, memo) == place(req, cat, ctx)


@pytest.mark.parametrize("warning", [None, "daemon stopped (last seen 2 min ago) — ünïcode"])
def test_the_status_document_encodes_byte_for_byte_as_json_dumps(make_world, warning):
    w = make_world()
    for i in range(4):
        w.submit(name=f"j{i}", gpus="V100:1" if i % 2 else "A100:8")
    w.tick()
    rows = read_models.job_rows(w.rec.engine)
    rows[0]["reason"] = 'quotes " and \\ and\nnewline, ✓'
    for doc in (
        read_models.document(jobs=rows, daemon_warning=warning),
        read_models.document(jobs=[], daemon_warning=warning),
        read_models.document(id="x", nested={"a": [1, {"b": 2}]}),  # not flat: the fallback
    ):
        expected = json.dumps(doc, indent=2, default=read_models.json_default)
        assert read_models.dumps_document(doc) == expected


def test_status_rows_with_iso_times_are_what_json_default_writes_in_time_order(make_world):
    """The -o json path formats times in SQL and sorts there: the text must be exactly
    json_default's (a zero fraction dropped, six digits otherwise) and the order by time,
    not by text (".5Z" sorts before "Z" as text but is later)."""
    from sqlmodel import Session

    from scheduler.core.states import AttemptState
    from scheduler.state.models import Attempt, Job

    w = make_world()
    whole = w.submit(name="whole", gpus="V100:1")
    w.clock.advance(0.5)
    half = w.submit(name="half", gpus="V100:1", deadline="2026-06-02T00:00:00.000123Z")
    w.clock.advance(0.25)
    done = w.submit(name="done", gpus="V100:1")
    w.tick()
    with Session(w.rec.engine) as s:
        job = s.get(Job, done)
        job.state = JobState.SUCCEEDED
        (a,) = w.attempts(done)
        ended = s.get(Attempt, a.id)
        ended.state = AttemptState.ENDED
        s.add_all([job, ended])
        s.commit()
    rows = read_models.job_rows(w.rec.engine)
    iso = read_models.job_rows(w.rec.engine, iso_times=True)
    assert [r["id"] for r in rows] == [half, whole, done]  # active newest first, then finished
    assert json.loads(json.dumps(rows, default=read_models.json_default)) == iso
    by_id = {r["id"]: r for r in iso}
    assert by_id[whole]["created_at"].endswith(":00Z") and "." not in by_id[whole]["created_at"]
    assert by_id[half]["created_at"].endswith(":00.500000Z")
    assert by_id[half]["deadline"] == "2026-06-02T00:00:00.000123Z"
    assert by_id[whole]["deadline"] is None and by_id[whole]["instance_id"] is not None
    assert by_id[done]["instance_id"] is None  # an ended attempt is not shown


def _status_world(make_world):
    """Jobs in every shape `status` shows: running, recovering onto a second attempt, pending
    with a deadline (whole and fractional seconds), finished, several created at one instant
    (the order falls back to ids), and reasons that hold what an encoder must escape."""
    from sqlmodel import Session

    from scheduler.state.models import Job

    w = make_world()
    same = [w.submit(name=f"same{i}", gpus="V100:1") for i in range(5)]
    w.clock.advance(0.5)
    w.submit(name="half", gpus="V100:1", deadline="2026-06-02T00:00:00.000123Z")
    w.submit(name="whole", gpus="A100:8", deadline="2026-06-03T00:00:00Z")
    w.tick()
    w.provider.end(w.attempts(same[0])[0].instance_id, EndReason.INTERRUPTED)
    w.tick()
    w.tick()
    w.provider.end(w.attempts(same[1])[0].instance_id, EndReason.EXITED, exit_code=0)
    w.tick()
    with Session(w.rec.engine) as s:
        job = s.get(Job, same[2])
        job.reason = 'quotes " \\ \x1e sep, newline\n, %s, ünïcode ✓, \x00'
        s.add(job)
        s.commit()
    return w, same


def test_status_json_is_the_rows_json_dumps_writes_byte_for_byte(make_world):
    """`status -o json` encodes a column at a time: the document must be exactly what
    json.dumps writes for `job_rows` (the shown attempt is the job's latest, times as
    json_default writes them, the order and every escape the same)."""
    w, same = _status_world(make_world)
    assert len(w.attempts(same[0])) == 2 and w.attempts(same[0])[1].instance_id
    rows = read_models.job_rows(w.rec.engine)
    by_id = {r["id"]: r for r in rows}
    assert by_id[same[0]]["instance_id"] == w.attempts(same[0])[1].instance_id  # the latest
    assert by_id[same[1]]["instance_id"] is None and by_id[same[1]]["state"] == "SUCCEEDED"
    # the engine (sorted by Python) and the CLI's sqlite3 file (sorted by SQLite)
    for db, kw in product(
        (w.rec.engine, open_for_reading(str(w.rec.engine.url))),
        ({}, {"states": ["running"]}, {"team": "nobody"}),
    ):
        expected = read_models.document(
            jobs=read_models.job_rows(w.rec.engine, **kw), daemon_warning="w"
        )
        fast = read_models.document(jobs=read_models.job_rows_json(db, **kw), daemon_warning="w")
        text = json.dumps(expected, indent=2, default=read_models.json_default)
        assert read_models.dumps_document(fast) == text, kw
        written: list[str] = []
        read_models.write_document(fast, written.append)
        assert "".join(written) == text, kw
    assert json.loads(text)["jobs"] == []  # the last filter matched nothing: "[]" as well


def test_status_rows_are_active_first_then_newest_then_by_id_with_the_latest_attempt(make_world):
    from sqlmodel import Session, select

    from scheduler.core.states import AttemptState
    from scheduler.state.models import Attempt, Job

    w, _ = _status_world(make_world)
    with Session(w.rec.engine) as s:
        jobs = list(s.exec(select(Job)).all())
        attempts = list(s.exec(select(Attempt)).all())
    expected = sorted(jobs, key=lambda j: j.id)
    expected.sort(key=lambda j: j.created_at, reverse=True)
    expected.sort(key=lambda j: j.state.terminal)
    latest = {a.job_id: a for a in sorted(attempts, key=lambda a: a.number)}
    shown = {
        j.id: latest[j.id].instance_id
        for j in jobs
        if j.id in latest and latest[j.id].state is not AttemptState.ENDED
    }
    file = open_for_reading(str(w.rec.engine.url))  # the CLI's way in: SQLite sorts
    for rows in (
        read_models.job_rows(w.rec.engine),
        json.loads(read_models.job_rows_json(w.rec.engine).text),
        read_models.job_rows(file),
        json.loads(read_models.job_rows_json(file).text),
    ):
        assert [r["id"] for r in rows] == [j.id for j in expected]
        assert {r["id"]: r["instance_id"] for r in rows} == {j.id: shown.get(j.id) for j in jobs}
    assert len({j.created_at for j in jobs}) < len(jobs)  # ties exist: ids decide them


@pytest.mark.parametrize(
    "stored",
    [
        ["2026-06-01 00:00:00.000000", None, "2026-06-01 00:00:00.500000"],
        ["2026-06-01 00:00:00.000001"] * 3,
        [None, None],
        ["2026-06-01 00:00:00", "2026-06-01 00:00:00.250000"],  # written by hand: per value
        ["2026-06-01 00:00:00.000+00"],  # 26 wide, not SQLAlchemy's format
        ["2026-06-01 00:00:00.00000Z", "2026-06-01 00:00:00.000000"],
    ],
)
def test_times_converted_a_column_at_a_time_are_json_defaults(stored):
    assert read_models._iso_column(stored) == [read_models._iso(x) for x in stored]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 4).flatmap(
        lambda width: st.lists(
            st.tuples(
                *[
                    st.none()
                    | st.booleans()
                    | st.integers()
                    | st.floats(allow_nan=False)
                    | st.text()
                ]
                * width
            ),
            max_size=7,
        ).map(lambda rows: (width, rows))
    ),
    st.integers(1, 3),
)
def test_a_table_encoded_in_pieces_by_columns_is_what_json_dumps_writes(table, rows_per_piece):
    width, rows = table
    fields = tuple(f"f{i}" for i in range(width))
    dicts = [dict(zip(fields, r, strict=True)) for r in rows]
    expected = json.dumps({"rows": dicts}, indent=2)
    encoded = read_models.EncodedJson(
        lambda: read_models._encode_table(fields, rows, rows_per_piece=rows_per_piece)
    )
    assert read_models.dumps_document({"rows": encoded}) == expected
    written: list[str] = []
    read_models.write_document({"rows": encoded}, written.append)
    assert "".join(written) == expected  # encoded afresh, written as it is encoded
    assert len(written) >= 2 + -(-len(rows) // rows_per_piece)


def test_a_late_end_refunds_into_the_earlier_hours_bucket(make_world):
    """Accrued past an end learned late: the refund lands in the buckets already written
    for those hours (one preload, no duplicate bucket), and buckets sum to the cost."""
    from sqlmodel import Session, select

    from scheduler.state.models import Attempt, SpendBucket

    w = make_world()
    jid = w.submit(gpus="V100:1")
    w.tick()
    w.tick(1800, n=5)  # 2.5 h accrued, across hour boundaries
    (a,) = w.attempts(jid)
    ended = a.started_at + timedelta(minutes=50)  # it really ended in the first hour
    with Session(w.rec.engine) as s:
        row = s.get(Attempt, a.id)
        row.ended_at = ended
        s.add(row)
        s.commit()
    w.rec.accrue()
    with Session(w.rec.engine) as s:
        row = s.get(Attempt, a.id)
        buckets = s.exec(select(SpendBucket).where(SpendBucket.attempt_id == a.id)).all()
    paid = row.price_per_hour * (ended - row.started_at).total_seconds() / 3600
    assert row.accrued_until == ended
    assert abs(row.cost_usd - paid) < 1e-6
    assert abs(sum(b.usd for b in buckets) - paid) < 1e-6
    assert len({b.hour for b in buckets}) == len(buckets)


def _row(obj, drop: set[str]) -> dict:
    return {k: v for k, v in obj.model_dump().items() if k not in drop}


@pytest.mark.parametrize("state", ["running", "pending"])
def test_a_launch_recorded_in_bulk_writes_the_rows_the_orm_path_writes(make_world, state):
    """The core statements that record a pass's launches write, column for column, the node
    row, attempt, job and event that recording one launch through the ORM writes."""
    from sqlmodel import Session, select

    from providers.base import Instance, InstanceState
    from scheduler.daemon.controllers.base import Result
    from scheduler.daemon.controllers.launch.records import record_launched
    from scheduler.state.audit import emit_many
    from scheduler.state.models import Attempt, AttemptInstance, Event, Job

    w = make_world()
    jobs = [w.submit(name="same", gpus="V100:1") for _ in range(2)]
    w.clock.advance(5)
    bulk, orm = sorted(w.rec.jobs.step(), key=lambda a: jobs.index(a.rsplit("-a", 1)[0]))
    w.clock.advance(5)
    now = w.clock.now()

    def inst(n: int) -> Instance:
        return Instance(
            f"i-{n}", "aws", "us-east-2", "", "p3.2xlarge", Market.SPOT,
            InstanceState(state), launched_at=now - timedelta(seconds=3), scope="rg-1",
        )  # fmt: skip

    with w.rec.db.write() as s:
        events: list[dict] = []
        done = record_launched(s, {bulk: Result(value=[inst(0)])}, now, events)
        emit_many(s, events)
    assert list(done) == [bulk] and done[bulk].launched
    with w.rec.db.write() as s:
        w.rec.launches.records.record_in(s, orm, [inst(1)], None, now)
    with Session(w.rec.engine) as s:
        nodes = {r.attempt_id: r for r in s.exec(select(AttemptInstance)).all()}
        attempts = {aid: s.get(Attempt, aid) for aid in (bulk, orm)}
        job_rows = [s.get(Job, j) for j in jobs]
        launched = {e.attempt_id: e for e in s.exec(select(Event)).all() if e.kind == "launched"}
    ids = {"id", "attempt_id", "instance_id", "job_id", "token"}
    assert _row(nodes[bulk], ids) == _row(nodes[orm], ids)
    assert nodes[bulk].instance_id == "i-0" and nodes[bulk].region == "us-east-2"
    assert _row(attempts[bulk], ids) == _row(attempts[orm], ids)
    assert attempts[bulk].instance_id == "i-0" and attempts[bulk].instance_scope == "rg-1"
    assert _row(job_rows[0], {"id", "checkpoint_uri"}) == _row(
        job_rows[1], {"id", "checkpoint_uri"}
    )
    expected = JobState.RUNNING if state == "running" else JobState.LAUNCHING
    assert job_rows[0].state is expected
    assert launched[bulk].message.replace("i-0", "i-1") == launched[orm].message
    assert launched[bulk].job_id == jobs[0] and launched[orm].job_id == jobs[1]
