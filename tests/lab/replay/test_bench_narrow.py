"""`spotwise bench deadline` in an 80-column terminal: rich squeezed the full tables' cells
into "…" there, so the bench prints a narrow form; piped output keeps the full tables."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import pytest
from typer.testing import CliRunner

from scheduler.cli.bench import MISS_ORDER, bench_app

pty = pytest.importorskip("pty")  # POSIX terminals only
fcntl = pytest.importorskip("fcntl")
termios = pytest.importorskip("termios")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def in_terminal(*args: str, columns: int = 80, stderr_too: bool = False) -> list[str]:
    """What `spotwise ARGS` prints on a pseudo-terminal of this width, as a user runs it (the
    bench sizes its tables from the terminal only when stdout is one), colours stripped. The
    progress lines on stderr go to a file, unless `stderr_too` (then the raw text is kept:
    carriage returns included)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    chunks = []
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave if stderr_too else err,
            env=dict(os.environ, COLUMNS=str(columns)),
        )
        os.close(slave)
        try:
            while True:  # read as it comes: a terminal's buffer is a few KiB
                try:
                    data = os.read(master, 1 << 16)
                except OSError:  # EIO: the child closed its side
                    break
                if not data:
                    break
                chunks.append(data)
            if proc.wait(timeout=30) != 0:
                err.seek(0)
                pytest.fail(err.read().decode(errors="replace"))
        finally:
            os.close(master)
            if proc.poll() is None:
                proc.kill()
    text = ANSI.sub("", b"".join(chunks).decode())
    return text.split("\n") if stderr_too else text.splitlines()


def assert_fits(lines: list[str], columns: int = 80) -> None:
    wide = [ln for ln in lines if len(ln) > columns]
    assert not wide, "\n".join(wide)
    cut = [ln for ln in lines if "…" in ln]
    assert not cut, "\n".join(cut)


def cells(lines: list[str]) -> list[list[str]]:
    """The body rows of every table, cell by cell."""
    return [[c.strip() for c in ln.strip("│").split("│")] for ln in lines if "│" in ln]


def test_bench_deadline_fits_an_80_column_terminal() -> None:
    lines = in_terminal("bench", "deadline", "--quick")
    assert_fits(lines)
    text = "\n".join(lines)
    best = re.findall(r"spotwise - best of \(greedy, UP\): [+-]\d+\.\d points, 95% CI \[", text)
    assert len(best) == 6  # one per setting
    rows = cells(lines)
    for policy in ("on-demand", "greedy", "uniform-progress", "spotwise", "spotwise-cold"):
        mine = [r for r in rows if r[0] == policy]
        assert len(mine) == 6, policy  # the whole name, in every setting's table
        for r in mine:  # cost, misses, score, CI, worse than UP, worst / all-OD
            assert re.fullmatch(r"\d+\.\d\d", r[1]) and r[2].isdigit(), r
            assert re.fullmatch(r"-?\d+\.\d", r[3]) and r[4].startswith("["), r
            assert r[5].endswith("%") and re.fullmatch(r"\d\.\d{3}", r[6]), r
    assert "narrow form" in text and "-o json" in text


def test_bench_deadline_sweep_fits_an_80_column_terminal() -> None:
    lines = in_terminal("bench", "deadline", "--sweep", "--quick")
    assert_fits(lines)
    doc = json.loads(
        CliRunner().invoke(bench_app, ["deadline", "--sweep", "--quick", "-o", "json"]).stdout
    )
    rows = cells(lines)
    for s in doc["settings"]:
        _, o, k = s["setting"].split()
        key = [o.split("=")[1], k.split("=")[1] + "x"]
        d = s["spotwise_minus_best_baseline"]
        lo, hi = d["ci95"]
        by = {r["policy"]: r for r in s["policies"]}
        misses = "/".join(str(by[p]["deadline_misses"]) for p in MISS_ORDER)
        mine = [r for r in rows if r[:2] == key]
        assert any(f"{d['score']:+.1f} [{lo:.1f}, {hi:.1f}]" in r and misses in r for r in mine)
        assert any(f"{by['uniform-progress']['score']:.1f}" in r for r in mine)  # scores too
    text = "\n".join(lines)
    assert "narrow form" in text and "-o json" in text


def test_a_wide_terminal_gets_the_full_sweep_table() -> None:
    lines = in_terminal("bench", "deadline", "--sweep", "--quick", columns=200)
    assert_fits(lines, 200)
    assert "narrow form" not in "\n".join(lines)
    assert any("uniform-progress" in ln and "single-zone" in ln for ln in lines)


def test_piped_tables_never_wrap_a_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped, the full sweep table is as wide as it needs: at a fixed 180 columns rich wrapped
    the full run's CIs onto a second line of every row."""
    import io

    from rich.console import Console

    from scheduler.cli import bench

    doc = json.loads(
        CliRunner().invoke(bench_app, ["deadline", "--sweep", "--quick", "-o", "json"]).stdout
    )
    buf = io.StringIO()
    monkeypatch.setattr(bench, "_PIPED", True)
    monkeypatch.setattr(bench, "_out", Console(file=buf, width=100))  # narrower than needed
    bench._print_sweep(doc)
    sweep, averages = buf.getvalue().split("averaged over the cells")
    rows = [ln for ln in sweep.splitlines() if ln.startswith("│")]
    assert len(rows) == len(doc["settings"]), "\n".join(rows)  # one line per cell's row
    assert all("…" not in ln for ln in rows)
    rows = [ln for ln in averages.splitlines() if ln.startswith("│")]
    assert len(rows) == len(doc["sweep_average"]) and all("…" not in ln for ln in rows)


def test_bench_progress_on_a_terminal_is_one_line_that_never_wraps() -> None:
    """The step counter ("[81/638] sweep o=0.02 slack=1.5: 2023 4 zones (...) w=96", about
    105 columns) is rewritten in place on a terminal and cut to its width; each piece the
    terminal draws between carriage returns fits in 80 columns."""
    lines = in_terminal("bench", "deadline", "--quick", stderr_too=True)
    drawn = [piece for ln in lines for piece in ln.split("\r")]
    assert_fits([p.rstrip() for p in drawn])
    steps = [p for p in drawn if re.match(r"\[\d+/\d+\] ", p)]
    assert len(steps) > 3
    # in place: the counter never starts a line of its own (each step follows a "\r")
    assert not [ln for ln in lines if re.match(r"\[\d+/\d+\] ", ln)]
