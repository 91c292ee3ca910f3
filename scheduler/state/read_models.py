"""Read models for the CLI: plain dicts (JSON-ready) built from the database and providers.

One field name per concept in every document: `cost_usd` is what a job or attempt has cost,
`instance_id` the provider's instance id; budgets keep `spent_usd` (a window's spend).

What `status`, `show`, `logs` and `events` read is plain SQL over a DB-API connection
(read_connection: sqlite3 on SQLite, the engine's own connection elsewhere), so those
commands never import SQLAlchemy or the tables; the spend reads (budgets, costs) use the
tables and are imported with them. One module, over 600 lines: every read a command prints
and the one JSON encoding all of them are written with (scripts compare it byte for byte).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from providers.local.layout import instance_dir
from scheduler.core.errors import UserError
from scheduler.core.read_settings import ReadSettings
from scheduler.core.state_dir import default_state_dir
from scheduler.core.states import AttemptState, JobState
from scheduler.state.read_connection import Query, SqliteFile, placeholders, reading

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from providers.base import Provider
    from scheduler.core.config import Config
    from scheduler.state.read_connection import Database

# Bumped when a field of any -o json document is renamed or removed (2: cost_usd, instance_id).
JSON_VERSION = 2
# Finished jobs older than this are hidden from `status` unless --all (sky --skip-finished).
FINISHED_VISIBLE = timedelta(hours=1)


def document(**fields: Any) -> dict[str, Any]:
    """Every -o json document starts with its format version, so scripts can check it."""
    return {"version": JSON_VERSION, **fields}


def json_default(value: Any) -> Any:
    """ISO-8601 UTC for times, plain values for enums."""
    if isinstance(value, datetime):
        if value.tzinfo is not UTC:
            value = value.astimezone(UTC)
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


@dataclass(frozen=True, slots=True)
class EncodedJson:
    """A value already encoded as `dumps_document` writes it under a top-level key, as the
    pieces `pieces()` yields (see `job_rows_json`): inserted as they are. A table of 10,000
    jobs is about 7 MB of text; encoded a few hundred rows at a time while it is written, it
    is never whole in memory, and the copies a whole one costs (each slower than encoding
    it) are never made. Each call of `pieces` encodes afresh."""

    pieces: Callable[[], Iterator[str]]

    @property
    def text(self) -> str:
        return "".join(self.pieces())


def dumps_document(doc: dict[str, Any]) -> str:
    """`json.dumps(doc, indent=2, default=json_default)`, byte for byte, with the C encoder
    for lists of flat rows (dicts of scalars, as `job_rows` builds them): the pure-Python
    encoder that `indent` selects costs more than building the rows. Any other value is
    encoded on its own and indented one level (exact: strings never hold a raw newline)."""
    return "".join(document_pieces(doc))  # one join: a document's rows can be megabytes


def write_document(doc: dict[str, Any], write: Callable[[str], object]) -> None:
    """`dumps_document(doc)` given to `write` piece by piece (a command's standard output):
    a large document is encoded while it is written instead of built first."""
    for piece in document_pieces(doc):
        write(piece)


def document_pieces(doc: dict[str, Any]) -> Iterator[str]:
    """The text of `dumps_document(doc)`, in order, in pieces."""
    if not isinstance(doc, dict) or not doc:
        yield json.dumps(doc, indent=2, default=json_default)
        return
    key_of = json.JSONEncoder().encode
    yield "{\n"
    for i, (key, value) in enumerate(doc.items()):
        yield (",\n" if i else "") + "  " + key_of(key) + ": "
        if isinstance(value, EncodedJson):
            yield from value.pieces()
        else:
            yield _encode_any(value)
    yield "\n}"


def _encode_any(value: Any) -> str:
    """One top-level value of a document, as json.dumps(indent=2) writes it at depth 1."""
    if _flat_rows(value):
        return _encode_rows(value)
    return json.dumps(value, indent=2, default=json_default).replace("\n", "\n  ")


def _flat_rows(value: Any) -> bool:
    """A non-empty list of non-empty dicts whose values encode as JSON scalars."""
    if not (isinstance(value, list) and value and all(type(r) is dict and r for r in value)):
        return False
    kinds = set(map(type, chain.from_iterable(map(dict.values, value))))
    return not any(issubclass(k, (dict, list, tuple)) for k in kinds)


# Inside a flat row the item separator is the only whitespace json.dumps(indent=2) writes at
# the rows' depth, so one C-encoder call writes every row; rows then differ from that only
# where one row ends and the next begins ("},<sep>{" occurs nowhere else: values are scalars
# and an encoded string never holds a raw newline).
_ROW_SEP = ",\n      "
_encode_flat = json.JSONEncoder(default=json_default, separators=(_ROW_SEP, ": ")).encode


def _encode_rows(rows: list[dict[str, Any]]) -> str:
    body = _encode_flat(rows)[2:-2].replace("}" + _ROW_SEP + "{", "\n    },\n    {\n      ")
    return "[\n    {\n      " + body + "\n    }\n  ]"


# The encoder escapes every control character inside a string, so in its output this one
# only ever separates values: one C-encoder call writes a whole table's values.
_VALUE_SEP = "\x1e"
_encode_values = json.JSONEncoder(default=json_default, separators=(_VALUE_SEP, ": ")).encode


# Rows per piece of an encoded table: a few hundred keep a piece's work in the CPU's caches
# (measured over 10,000 jobs: 200 to 1,000 alike, 5,000 slower).
ROWS_PER_PIECE = 500


def _encode_table(
    fields: tuple[str, ...],
    rows: Sequence[Sequence[Any]],
    convert: Callable[[list[Any]], None] | None = None,
    rows_per_piece: int = ROWS_PER_PIECE,
) -> Iterator[str]:
    """Rows of `fields` (tuples, as the driver gives them) as `_encode_rows` writes the same
    rows as dicts, in pieces of `rows_per_piece` rows. A piece's values are flattened into
    one list (`convert` rewrites its columns in place: see `_status_columns`), encoded by
    one C-encoder call, and put into one template of that many rows (a `%` per piece, not a
    piece per value)."""
    if not rows:
        yield "[]"
        return
    key_of = json.JSONEncoder().encode
    # The template is made of field names (no %); the values are inserted, never parsed.
    row = "    {\n" + ",\n".join(f"      {key_of(f)}: %s" for f in fields) + "\n    }"
    whole = ",\n".join([row] * rows_per_piece)
    yield "[\n"
    for start in range(0, len(rows), rows_per_piece):
        piece = rows[start : start + rows_per_piece]
        values = list(chain.from_iterable(piece))
        if convert is not None:
            convert(values)
        encoded = _encode_values(values)[1:-1].split(_VALUE_SEP)
        template = whole if len(piece) == rows_per_piece else ",\n".join([row] * len(piece))
        yield (",\n" if start else "") + template % tuple(encoded)
    yield "\n  ]"


# The columns each row builder reads, in the order the queries select them.
_JOB_COLUMNS = (
    "id", "name", "team", "state", "reason", "cost_usd", "attempts", "recoveries",
    "progress_step", "total_steps", "deadline", "checkpoint_uri", "created_at", "updated_at",
    "submitted_by", "spec_json",
)  # fmt: skip
_ATTEMPT_COLUMNS = (
    "id", "number", "provider", "cloud", "region", "zone", "instance_type", "market", "pool",
    "price_per_hour", "instance_id", "state", "created_at", "started_at", "ended_at",
    "end_reason", "exit_code", "cost_usd", "nodes", "detail", "stop_reason", "notice_at",
)  # fmt: skip
_NODE_COLUMNS = (
    "attempt_id", "node", "round", "instance_id", "zone", "state", "started_at", "ended_at",
    "end_reason", "exit_code", "cost_usd",
)  # fmt: skip
_EVENT_COLUMNS = ("id", "at", "level", "kind", "job_id", "attempt_id", "message", "actor")


def _select(table: str, columns: tuple[str, ...]) -> str:
    return f"SELECT {', '.join(columns)} FROM {table}"


def _node_row(n: dict[str, Any]) -> dict[str, Any]:
    return {
        "node": n["node"],
        # 0: launched with the gang; r: replaced a lost node in rendezvous round r.
        "round": n["round"],
        "instance_id": n["instance_id"],
        "zone": n["zone"],
        "state": n["state"] or None,
        "started_at": _when(n["started_at"]),
        "ended_at": _when(n["ended_at"]),
        "end_reason": n["end_reason"],
        "exit_code": n["exit_code"],
        "cost_usd": round(n["cost_usd"], 6),
    }


def _attempt_row(a: dict[str, Any], nodes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "id": a["id"],
        "number": a["number"],
        "provider": a["provider"],
        "cloud": a["cloud"],
        "region": a["region"],
        "zone": a["zone"],
        "instance_type": a["instance_type"],
        "market": a["market"],
        "pool": a["pool"],
        "price_per_hour": a["price_per_hour"],
        "instance_id": a["instance_id"],
        "state": a["state"],
        "created_at": _when(a["created_at"]),
        "started_at": _when(a["started_at"]),
        "ended_at": _when(a["ended_at"]),
        "end_reason": a["end_reason"] or None,
        "exit_code": a["exit_code"],
        "cost_usd": round(a["cost_usd"], 6),
        "nodes": a["nodes"],
        "detail": a["detail"],
        "stop_reason": a["stop_reason"],
        "notice_at": _when(a["notice_at"]),
        # One per node (a gang's N instances, each billed at the price paid).
        "instances": [_node_row(n) for n in nodes or []],
    }


def _job_row(j: dict[str, Any], current: dict[str, Any] | None) -> dict[str, Any]:
    ended = AttemptState.ENDED.value
    live = current if current is not None and current["state"] != ended else None
    return {
        "id": j["id"],
        "name": j["name"],
        "team": j["team"],
        "state": j["state"],
        "reason": j["reason"],
        "cloud": live["cloud"] if live else None,
        "region": live["region"] if live else None,
        "zone": live["zone"] if live else None,
        "instance_type": live["instance_type"] if live else None,
        "instance_id": live["instance_id"] if live else None,
        "market": live["market"] if live else None,
        "price_per_hour": live["price_per_hour"] if live else None,
        "cost_usd": round(j["cost_usd"], 6),
        "attempts": j["attempts"],
        "recoveries": j["recoveries"],
        "progress_step": j["progress_step"],
        "total_steps": j["total_steps"],
        "deadline": _when(j["deadline"]),
        "checkpoint_uri": j["checkpoint_uri"],
        "created_at": _when(j["created_at"]),
        "updated_at": _when(j["updated_at"]),
        "provider": live["provider"] if live else None,
        "nodes": live["nodes"] if live else None,
        "submitted_by": j["submitted_by"],
    }


def job_rows(
    db: Database,
    *,
    states: list[str] | None = None,
    team: str | None = None,
    iso_times: bool = False,
    teams: tuple[str, ...] | None = None,
) -> list[dict[str, Any]]:
    """Jobs with their latest attempt unless it ended, active first, then newest first. One
    query of plain columns: no object per row, so `status` over tens of thousands of jobs
    stays fast.
    `iso_times` gives times as the ISO-8601 text `json_default` writes (for a document
    encoded at once) instead of datetimes. `teams` (the API server's caller): only the jobs
    of these teams (None: every team)."""
    rows = _status_rows(db, states, team, teams)
    to = _iso if iso_times else _when
    return [
        dict(
            zip(
                _STATUS_FIELDS,
                (
                    *r[:12],
                    round(r[12], 6),
                    *r[13:17],
                    to(r[17]),
                    r[18],
                    to(r[19]),
                    to(r[20]),
                    *r[21:],
                ),
                strict=True,
            )
        )
        for r in rows
    ]


def job_rows_json(
    db: Database,
    *,
    states: list[str] | None = None,
    team: str | None = None,
    teams: tuple[str, ...] | None = None,
) -> EncodedJson:
    """`job_rows(iso_times=True)` as `dumps_document` encodes it, a column at a time instead
    of a dict per row (over 10,000 jobs the dicts cost more than the query), a piece at a
    time. The rows are read here, in one read transaction closed before any is encoded: a
    reader that stops reading the output (a pager) holds no snapshot of the database."""
    rows = _status_rows(db, states, team, teams)
    return EncodedJson(lambda: _encode_table(_STATUS_FIELDS, rows, _status_columns))


def _status_columns(values: list[Any]) -> None:
    """A piece of status rows, flattened, as the document holds it: costs rounded to six
    places, times as `json_default` writes them."""
    width = len(_STATUS_FIELDS)
    for i, name in enumerate(_STATUS_FIELDS):
        if name == "cost_usd":
            values[i::width] = [round(x, 6) for x in values[i::width]]
        elif name in _TIME_FIELDS:
            values[i::width] = _iso_column(values[i::width])


def _status_rows(
    db: Database,
    states: list[str] | None,
    team: str | None,
    teams: tuple[str, ...] | None = None,
) -> list[tuple[Any, ...]]:
    """`_STATUS_FIELDS` per job, times as stored, in status order: active first, then newest
    first, then by id (ids are unique: the order is total). SQLite sorts (its text order is
    Python's: bytes of UTF-8, code point by code point, and its times are stored as text);
    elsewhere Python does, since a server's collation may order ids otherwise and its
    times are values."""
    sql, params = _status_query(states, team, teams)
    if isinstance(db, SqliteFile):
        sql += f" ORDER BY job.state IN ({placeholders(_TERMINAL)}), job.created_at DESC, job.id"
        with reading(db) as query:
            return query(sql, [*params, *_TERMINAL])
    with reading(db) as query:
        rows = query(sql, params)
    rows.sort(key=itemgetter(_STATUS_FIELDS.index("id")))
    rows.sort(key=itemgetter(_STATUS_FIELDS.index("created_at")), reverse=True)  # stable
    state = _STATUS_FIELDS.index("state")
    return [r for r in rows if r[state] not in _TERMINAL] + [
        r for r in rows if r[state] in _TERMINAL
    ]


def _status_query(
    states: list[str] | None, team: str | None, teams: tuple[str, ...] | None = None
) -> tuple[str, list[Any]]:
    """The status query and its parameters. A job's latest attempt is the one numbered
    `job.attempts` (both are written in one transaction: see Attempt.number), found through
    (job_id, number) per job, and shown only while it is live."""
    # in the document's field order: see _STATUS_FIELDS
    sql = (
        "SELECT job.id, job.name, job.team, job.state, job.reason, live.cloud, live.region, "
        "live.zone, live.instance_type, live.instance_id, live.market, live.price_per_hour, "
        "job.cost_usd, job.attempts, job.recoveries, job.progress_step, job.total_steps, "
        "job.deadline, job.checkpoint_uri, job.created_at, job.updated_at, live.provider, "
        "live.nodes, job.submitted_by "
        "FROM job LEFT OUTER JOIN attempt AS live ON live.job_id = job.id "
        f"AND live.number = job.attempts AND live.state IN ({placeholders(_LIVE)})"
    )
    params: list[Any] = list(_LIVE)
    where = []
    if states:
        wanted = [JobState(x.upper()).value for x in states]
        where.append(f"job.state IN ({placeholders(wanted)})")
        params += wanted
    if team:
        where.append("job.team = ?")
        params.append(team.strip().lower())
    if teams is not None:
        where.append(f"job.team IN ({placeholders(teams)})" if teams else "1 = 0")
        params += list(teams)
    return sql + (f" WHERE {' AND '.join(where)}" if where else ""), params


def _iso_column(stored: list[Any]) -> list[str | None]:
    """Stored times as `json_default` writes them. SQLite's text ("YYYY-MM-DD
    HH:MM:SS.ffffff", checked by a pattern) is rewritten a column at a time: a "T",
    no zero fraction (isoformat drops it), then "Z". Anything else goes value by value."""
    present = [x for x in stored if x is not None]
    if not present:
        return [None] * len(stored)
    sep = _VALUE_SEP  # never in a stored time
    text = sep.join(present) + sep if set(map(type, present)) == {str} else ""
    if not _STORED_TIMES.fullmatch(text):
        return [_iso(x) for x in stored]
    text = text.replace(" ", "T").replace(".000000" + sep, sep)
    iso: list[str | None] = list(text.replace(sep, "Z" + sep).split(sep)[:-1])
    if len(present) == len(stored):
        return iso
    it = iter(iso)
    return [None if x is None else next(it) for x in stored]


# SQLAlchemy's SQLite DATETIME text, each followed by _VALUE_SEP.
_STORED_TIMES = re.compile(r"(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\x1e)+", re.ASCII)

_STATUS_FIELDS = (
    "id",
    "name",
    "team",
    "state",
    "reason",
    "cloud",
    "region",
    "zone",
    "instance_type",
    "instance_id",
    "market",
    "price_per_hour",
    "cost_usd",
    "attempts",
    "recoveries",
    "progress_step",
    "total_steps",
    "deadline",
    "checkpoint_uri",
    "created_at",
    "updated_at",
    "provider",
    "nodes",
    "submitted_by",
)


def _when(value: Any) -> datetime | None:
    """A stored UTC time as an aware datetime (SQLite returns text, others naive values)."""
    if value is None:
        return None
    if type(value) is str:
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    return _aware(value)


def _iso(value: Any) -> str | None:
    """A stored UTC time as `json_default` writes it."""
    when = _when(value)
    return None if when is None else str(json_default(when))


_LIVE = [x.value for x in AttemptState if x is not AttemptState.ENDED]
_TERMINAL = tuple(x.value for x in JobState if x.terminal)
_TIME_FIELDS = frozenset({"deadline", "created_at", "updated_at"})


def hide_finished(rows: list[dict[str, Any]], cutoff: datetime) -> tuple[list[dict[str, Any]], int]:
    """The rows a person wants by default: finished jobs only if they finished after
    `cutoff` (the daemon's clock FINISHED_VISIBLE ago). Returns the rows kept and how many
    were left out (so the table can say so)."""
    kept = [r for r in rows if not JobState(r["state"]).terminal or r["updated_at"] >= cutoff]
    return kept, len(rows) - len(kept)


LEASE_NAME = "daemon"  # the heartbeat's row (state.lease.LEASE_NAME)


def daemon_heartbeat(db: Database) -> dict[str, Any] | None:
    """Which daemon holds the lease (the heartbeat row on SQLite), since when, and when it
    last renewed it; None when no daemon has run on this database."""
    with reading(db) as query:
        rows = query(
            "SELECT holder, pid, host, epoch, started_at, renewed_at, status "
            "FROM daemonlease WHERE name = ?",
            (LEASE_NAME,),
        )
    if not rows:
        return None
    holder, pid, host, epoch, started_at, renewed_at, status = rows[0]
    return {
        "holder": holder,
        "pid": pid,
        "host": host,
        "epoch": epoch,
        "since": _when(started_at),
        "renewed_at": _when(renewed_at),
        "status": status,
    }


def running_config_text(db: Database) -> str | None:
    """The configuration the daemon recorded beside its heartbeat (state.running_config),
    or None: no daemon yet, or one from before it recorded any."""
    with reading(db) as query:
        rows = query("SELECT config_json FROM daemonlease WHERE name = ?", (LEASE_NAME,))
    return rows[0][0] or None if rows else None


def attempt_running(db: Database, attempt_id: str) -> bool:
    """Whether the attempt exists and has not ended (what `logs -f` waits on)."""
    with reading(db) as query:
        rows = query("SELECT state FROM attempt WHERE id = ?", (attempt_id,))
    return bool(rows) and rows[0][0] != AttemptState.ENDED.value


def _event_row(e: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": e["id"],
        "at": _when(e["at"]),
        "level": e["level"],
        "kind": e["kind"],
        "job_id": e["job_id"],
        "attempt_id": e["attempt_id"],
        "message": e["message"],
        "actor": e["actor"],
    }


def attempt_logs(settings: ReadSettings | None, a: dict[str, Any]) -> dict[str, Any]:
    """Where an attempt's stdout and stderr are: files this machine can read (the local
    market) or, for a cloud instance, where the wrapper left them and how to get the console."""
    iid = a.get("instance_id")
    if not iid:
        return {"available": False, "note": "the attempt never got an instance"}
    if a.get("provider") == "local":
        d = local_instance_dir(settings, iid)
        return {
            "available": True,
            "dir": str(d),
            "stdout": str(d / "stdout.log"),
            "stderr": str(d / "stderr.log"),
        }
    # The cloud states where its boot script left the output (providers/instance_output.py).
    from providers.instance_output import instance_output

    output = instance_output(a.get("cloud") or "")
    note = (
        f"stdout and stderr are in {output.log_path} on {a.get('cloud')} instance {iid} (not "
        "uploaded; gone once the instance is deleted)"
    )
    return {
        "available": False,
        "path_on_instance": output.log_path,
        "console_command": output.console(iid, a.get("region"), a.get("zone")),
        "note": note,
    }


def local_instance_dir(settings: ReadSettings | None, instance_id: str) -> Path:
    """LocalMarket.instance_dir without starting a market (no trace load, no mkdir), by the
    layout the local provider states (providers/local/layout.instance_dir). Without settings:
    the market's default place under the default state directory."""
    root = settings.local_state_dir if settings else default_state_dir() / "local"
    return instance_dir(root, instance_id)


def tail(path: Path, lines: int) -> list[str]:
    """The last `lines` lines of a text file (reads at most the last 64 KiB)."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(size - 65536, 0))
            data = f.read()
    except OSError:
        return []
    return data.decode(errors="replace").splitlines()[-lines:]


def _find_job(query: Query, ref: str, teams: tuple[str, ...] | None = None) -> dict[str, Any]:
    """A job by id, id prefix or unique name (the newest with that name): the rules of
    state.desired.resolve, read without the tables. `teams`: only among those teams' jobs
    (a job of another team is not found, as if it did not exist)."""
    select = _select("job", _JOB_COLUMNS)
    params: list[Any] = []
    if teams is not None:
        select += f" WHERE team IN ({placeholders(teams)}) AND" if teams else " WHERE 1 = 0 AND"
        params = list(teams)
    else:
        select += " WHERE"
    like = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = query(f"{select} id = ?", (*params, ref))
    if not rows:
        rows = query(f"{select} id LIKE ? ESCAPE '\\' LIMIT 2", (*params, like))
        rows = rows if len(rows) == 1 else []
    if not rows:
        rows = query(f"{select} name = ? ORDER BY created_at DESC LIMIT 1", (*params, ref))
    if not rows:
        raise UserError(f"no job {ref!r} (use an id from 'spotwise status')")
    return dict(zip(_JOB_COLUMNS, rows[0], strict=True))


def job_detail(
    db: Database,
    ref: str,
    settings: ReadSettings | None = None,
    teams: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """One job (`_find_job`'s rules; `teams`: among those teams' jobs only): its row, spec,
    attempts with where their logs are, and its events."""
    with reading(db) as query:
        job = _find_job(query, ref, teams)
        attempts = [
            dict(zip(_ATTEMPT_COLUMNS, r, strict=True))
            for r in query(
                f"{_select('attempt', _ATTEMPT_COLUMNS)} WHERE job_id = ? ORDER BY number",
                (job["id"],),
            )
        ]
        events = query(
            f"{_select('event', _EVENT_COLUMNS)} WHERE job_id = ? ORDER BY id", (job["id"],)
        )
        nodes: dict[str, list[dict[str, Any]]] = {}
        ids = [a["id"] for a in attempts]
        if ids:
            for r in query(
                f"{_select('attemptinstance', _NODE_COLUMNS)} "
                f"WHERE attempt_id IN ({placeholders(ids)}) ORDER BY node, round",
                ids,
            ):
                n = dict(zip(_NODE_COLUMNS, r, strict=True))
                nodes.setdefault(n["attempt_id"], []).append(n)
    return {
        "job": _job_row(job, attempts[-1] if attempts else None),
        "spec": _spec_doc(job),
        "attempts": [_with_logs(settings, _attempt_row(a, nodes.get(a["id"]))) for a in attempts],
        "events": [_event_row(dict(zip(_EVENT_COLUMNS, e, strict=True))) for e in events],
    }


def job_attempts(db: Database, job_id: str, settings: ReadSettings | None = None) -> dict[str, Any]:
    """A job's state and its attempts (with where their logs are), without its events:
    what a follower of the job (`logs -f`) reads between two reads of its files."""
    with reading(db) as query:
        rows = query(f"{_select('job', _JOB_COLUMNS)} WHERE id = ?", (job_id,))
        if not rows:
            raise UserError(f"no job {job_id!r} (use an id from 'spotwise status')")
        job = dict(zip(_JOB_COLUMNS, rows[0], strict=True))
        attempts = [
            dict(zip(_ATTEMPT_COLUMNS, r, strict=True))
            for r in query(
                f"{_select('attempt', _ATTEMPT_COLUMNS)} WHERE job_id = ? ORDER BY number",
                (job_id,),
            )
        ]
    return {
        "job": _job_row(job, attempts[-1] if attempts else None),
        "attempts": [_with_logs(settings, _attempt_row(a)) for a in attempts],
    }


def _spec_doc(job: dict[str, Any]) -> dict[str, Any] | None:
    """What the job asked for, as it was submitted (the validated job file), with its
    deadline as a time; None if the stored spec no longer parses as JSON."""
    try:
        spec = json.loads(job["spec_json"] or "null")
    except ValueError:
        return None
    if not isinstance(spec, dict):
        return None
    spec["deadline_at"] = _when(job["deadline"])
    return spec


def _with_logs(settings: ReadSettings | None, row: dict[str, Any]) -> dict[str, Any]:
    row["logs"] = attempt_logs(settings, row)
    return row


def event_rows(
    db: Database,
    job: str | None,
    limit: int,
    *,
    since: datetime | None = None,
    kinds: list[str] | None = None,
    actor: str | None = None,
    after_id: int | None = None,
    teams: tuple[str, ...] | None = None,
) -> list[dict[str, Any]]:
    """The newest `limit` events, oldest first: of one job's when `job` is given, at or
    after `since`, of these `kinds` (a kind ending in '*' is a prefix: 'attempt_*'), caused
    by `actor` (a Unix user), with an id above `after_id` (what a follower has not seen).
    `teams` (the API server's caller): events of those teams' jobs, and those of no job."""
    with reading(db) as query:
        where: list[str] = []
        params: list[Any] = []
        if job:
            where.append("job_id = ?")
            params.append(_find_job(query, job, teams)["id"])
        elif teams is not None:
            inside = f"team IN ({placeholders(teams)})" if teams else "1 = 0"
            where.append(f"(job_id IS NULL OR job_id IN (SELECT id FROM job WHERE {inside}))")
            params += list(teams)
        if since is not None:
            where.append("at >= ?")
            params.append(_stored(since))
        if kinds:
            exact = [k for k in kinds if not k.endswith("*")]
            ors = [f"kind IN ({placeholders(exact)})"] if exact else []
            params += exact
            for k in kinds:
                if k.endswith("*"):
                    ors.append("kind LIKE ? ESCAPE '\\'")
                    params.append(k[:-1].replace("_", "\\_") + "%")
            where.append("(" + " OR ".join(ors) + ")")
        if actor:
            where.append("actor = ?")
            params.append(actor)
        if after_id is not None:
            where.append("id > ?")
            params.append(after_id)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = query(
            f"{_select('event', _EVENT_COLUMNS)}{clause} ORDER BY id DESC LIMIT ?",
            [*params, limit],
        )
    return [_event_row(dict(zip(_EVENT_COLUMNS, e, strict=True))) for e in reversed(rows)]


def _stored(t: datetime) -> str:
    """A time as the tables store it (naive UTC text, which sorts as time on every backend
    this compares it with)."""
    return t.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


def local_pools(db: Database, job_ids: list[str]) -> dict[str, set[str]]:
    """job id -> the pools its local-market attempts ran in, so what shows those pools can
    say they are the local market's (its offerings carry the real clouds' names)."""
    ids = sorted(set(i for i in job_ids if i))
    if not ids:
        return {}
    out: dict[str, set[str]] = {}
    with reading(db) as query:
        for job_id, pool in query(
            f"SELECT job_id, pool FROM attempt WHERE provider = 'local' "
            f"AND job_id IN ({placeholders(ids)})",
            ids,
        ):
            out.setdefault(job_id, set()).add(pool)
    return out


def budget_rows(engine: Engine, config: Config, now: datetime) -> list[dict[str, Any]]:
    """Configured budgets joined with the spend the daemon last accrued. `projected_usd` is
    the spend at the end of the current window (`projected_to`) if today's burn goes on; a
    "total" budget has no end, so it has no projection. `forecast_at`: when the limit is
    reached at that burn, if within the window."""
    from sqlmodel import Session, select

    from scheduler.core.budget import limit_reached_at, window_end
    from scheduler.state.models import BudgetSpend

    with Session(engine) as s:
        spent = {b.name: b for b in s.exec(select(BudgetSpend)).all()}
    rows = []
    for b in config.budgets:
        row = spent.get(b.name)
        used = row.spent_usd if row else 0.0
        burn = row.burn_per_hour if row else 0.0
        end = window_end(b.window, now)
        left_h = max(0.0, (end - now).total_seconds() / 3600.0) if end else 0.0
        rows.append(
            {
                "name": b.name,
                "scope": b.scope,
                "window": b.window.value,
                "window_start": row.window_start if row else None,
                "limit_usd": b.limit_usd,
                "hard": b.hard,
                "spent_usd": round(used, 6),
                "burn_per_hour": round(burn, 6),
                "projected_usd": round(used + burn * left_h, 6) if end else None,
                "projected_to": end,
                # When the limit is reached if this burn goes on (None: not in this window).
                "forecast_at": limit_reached_at(used, burn, b.limit_usd, now, end),
                "state": row.state if row else "ok",
                "updated_at": row.updated_at if row else None,
            }
        )
    return rows


COST_GROUPS = ("team", "job", "cloud", "day")


def cost_rows(
    engine: Engine,
    by: str,
    since: datetime | None,
    until: datetime | None,
    teams: tuple[str, ...] | None = None,
) -> list[dict[str, Any]]:
    """What was spent, grouped, from the hourly spend buckets budgets use (so the report and
    the budgets always agree). An hour's bucket counts when any of its hour is in the window.
    `teams` (the API server's caller): those teams' spend only."""
    import sqlalchemy as sa
    from sqlmodel import Session, col, func

    from scheduler.state.models import SpendBucket

    key = {
        "team": col(SpendBucket.team),
        "job": col(SpendBucket.job_id),
        "cloud": col(SpendBucket.cloud),
        "day": func.date(col(SpendBucket.hour)),
    }[by]
    # sqlalchemy's select: sqlmodel's is typed for at most four columns.
    q = sa.select(
        key,
        func.max(SpendBucket.job_name),
        func.sum(SpendBucket.usd),
        func.count(func.distinct(SpendBucket.job_id)),
        func.min(SpendBucket.hour),
        func.max(SpendBucket.hour),
    )
    if since is not None:
        q = q.where(col(SpendBucket.hour) > since - timedelta(hours=1))
    if until is not None:
        q = q.where(col(SpendBucket.hour) < until)
    if teams is not None:
        q = q.where(col(SpendBucket.team).in_(list(teams)))
    with Session(engine) as s:
        found = s.execute(q.group_by(key)).all()
    rows = [
        {
            by: str(k) if k is not None else "",
            **({"name": name} if by == "job" else {}),
            "cost_usd": round(float(usd or 0.0), 6),
            "jobs": int(n),
            "first_hour": _aware(first),
            "last_hour": _aware(last),
        }
        for k, name, usd, n, first, last in found
    ]
    rows.sort(key=lambda r: (r[by] if by == "day" else -r["cost_usd"], r[by]))
    return rows


def _aware(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def live_offerings(
    providers: Mapping[str, Provider], *, gpu: str | None, cloud: str | None, market: str | None
) -> tuple[list[dict[str, Any]], list[str]]:
    """Ask each configured provider for its offerings now (not the daemon's cached catalog)."""
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for name, provider in providers.items():
        if cloud and name != cloud and name != "local":
            continue
        try:
            offerings = provider.offerings()
        except Exception as e:
            problems.append(f"{name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
            continue
        drain = getattr(provider, "drain_events", None)
        if callable(drain):
            for m in drain():  # ProviderEvents; their messages may name the cloud already
                text = str(getattr(m, "message", m))
                problems.append(text if text.startswith(f"{name}:") else f"{name}: {text}")
        for o in offerings:
            if cloud and o.cloud != cloud:
                continue
            if gpu and o.gpu_model.upper() != gpu.upper():
                continue
            if market and o.market.value != market:
                continue
            rows.append(
                {
                    "provider": name,
                    "cloud": o.cloud,
                    "region": o.region,
                    "zone": o.zone,
                    "instance_type": o.instance_type,
                    "gpu_model": o.gpu_model,
                    "gpu_count": o.gpu_count,
                    "gpu_memory_gb": o.gpu_memory_gb,
                    "vcpus": o.vcpus,
                    "memory_gb": o.memory_gb,
                    "market": o.market.value,
                    "price_per_hour": o.price_per_hour,
                    "seen_at": o.seen_at,
                }
            )
    rows.sort(key=lambda r: (r["price_per_hour"], r["cloud"], r["zone"]))
    return rows, problems
