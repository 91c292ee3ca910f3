"""Fuzzed config and job files: only a UserError may escape, and nothing hangs.

Bounded (a few seconds). scripts/fuzz_inputs.py runs a longer campaign by hand.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.config import parse_config
from scheduler.core.errors import UserError
from scheduler.state.files import load_config, load_jobspec

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

SECTIONS = {
    "daemon": ["reconcile_interval", "price_interval", "accrue_interval", "stop_grace",
               "leak_grace", "launch_timeout", "owner", "database_url", "teams", "max_attempts",
               "metrics_port", "unavailable_ttl"],
    "providers.local": ["speedup", "trace", "trace_start", "grace_period", "kill_after"],
    "policy": ["deadline_policy", "restart_overhead", "spot_interruption_prior"],
    "[budgets]": ["name", "scope", "limit_usd", "window", "hard"],
}  # fmt: skip
JOB_KEYS = ["name", "team", "command", "gpus", "gpu_memory_gb", "cpus", "memory_gb", "nodes",
            "gpu_hours", "deadline", "max_price_per_hour", "clouds", "regions", "spot",
            "checkpoint", "checkpoint_interval", "env"]  # fmt: skip
HOSTILE = ["inf", "-inf", "nan", "1e308", "0", "-1", "9" * 30, "9" * 5000, '"0s"', '"1e400s"',
           '"99999999999d"', '"P99999999D"', '"[/]"', '"a\\u0000b"', '"A100x8"', '"gpc"',
           '"us-east-1a"', '"team:Research"', "1979-05-27", "07:32:00", "2020-01-01T00:00:00Z",
           "[]", "{}", '{ "A=B" = "1" }', '["x", 1]', "[" * 600 + "]" * 600,
           '"1' + " " * 20_000 + 'x"', '"""\n[' + " " * 20_000 + '\n"""']  # fmt: skip


def _toml_string(s: str) -> str:
    return '"' + "".join(c if c.isalnum() or c in " .:-_/[]" else f"\\u{ord(c):04x}" for c in s
                         if not 0xD800 <= ord(c) <= 0xDFFF) + '"'  # fmt: skip


values = st.one_of(
    st.sampled_from(HOSTILE),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(
        lambda f: {"inf": "inf", "-inf": "-inf"}.get(repr(f), "nan" if f != f else repr(f))
    ),
    st.text(max_size=30).map(_toml_string),
    st.booleans().map(lambda b: str(b).lower()),
)


@st.composite
def config_text(draw) -> str:  # type: ignore[no-untyped-def]
    out = []
    for section in draw(st.lists(st.sampled_from(list(SECTIONS)), max_size=4)):
        out.append(f"[[{section[1:-1]}]]" if section.startswith("[") else f"[{section}]")
        keys = st.one_of(st.sampled_from(SECTIONS[section]), st.sampled_from(['"[/]"', "x"]))
        for k in draw(st.lists(keys, max_size=5, unique=True)):
            v = draw(
                st.one_of(values, st.lists(values, max_size=3).map(lambda x: f"[{', '.join(x)}]"))
            )
            out.append(f"{k} = {v}")
    return "\n".join(out) + "\n"


@st.composite
def job_text(draw) -> str:  # type: ignore[no-untyped-def]
    keys = {"name": '"x"', "command": '["python"]'}
    for k in draw(st.lists(st.sampled_from(JOB_KEYS), max_size=6, unique=True)):
        keys[k] = draw(
            st.one_of(values, st.lists(values, max_size=3).map(lambda x: f"[{', '.join(x)}]"))
        )
    return "".join(f"{k} = {v}\n" for k, v in keys.items())


def _only_user_errors(load, path: Path) -> None:  # type: ignore[no-untyped-def]
    t = time.monotonic()
    try:
        load(path)
    except UserError as e:
        assert str(e).strip(), "an empty error message"
    assert time.monotonic() - t < 15.0  # a hang, not a slow machine


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "f.toml"
    path.write_bytes(data)
    _only_user_errors(load_config, path)
    _only_user_errors(load_jobspec, path)


@settings(FUZZ, max_examples=200)
@given(text=config_text())
def test_random_configs(text):
    with contextlib.suppress(UserError):
        parse_config(text, source="<fuzz>")


@settings(FUZZ, max_examples=200)
@given(text=job_text(), raw=st.booleans())
def test_random_job_files(tmp_path_factory, text, raw):
    path = tmp_path_factory.mktemp("fuzz") / "job.toml"
    path.write_bytes(text.encode() if not raw else text.encode()[::-1])
    _only_user_errors(load_jobspec, path)


# Real CLI runs (each a few seconds): binary, markup, nesting, overflow + a 200 KB value that
# took the old duration regex minutes, and the 200 KB header-like line of the old key scan.
NASTY = [
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",  # a binary file
    b'[daemon]\n"[/]" = 1\n',  # markup in a key
    b"x = " + b"[" * 5000 + b"]" * 5000,  # nesting
    b'[daemon]\nreconcile_interval = "99999999999999d"\nleak_grace = "1' + b" " * 200_000 + b'x"\n',
    b'[daemon]\nx = """\n[' + b" " * 200_000 + b'\n"""\n',  # super-linear key-line scan
]


@pytest.mark.parametrize("data", NASTY, ids=range(len(NASTY)))
def test_real_cli_one_line_no_traceback(tmp_path, data):
    path = tmp_path / "f.toml"
    path.write_bytes(data)
    t = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "scheduler", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.monotonic() - t < 30
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stderr.splitlines()
    assert lines and all(x.startswith(f"error: {path}: ") for x in lines), r.stderr
