"""What the commands share: plain lines on stdout exactly as Rich prints them."""

from __future__ import annotations

import io
import random

import pytest
from rich.console import Console

from scheduler.cli.common import StdoutLines, fold

WORDS = ["a", "to", "logs:", "/var/log/spotwise/job.log", "i-0abc123def", "(not", "uploaded;",
         "gone", "deleted)", "console:", "--zone=us-central1-a", "x" * 30]  # fmt: skip


def _rich(text: str, width: int, soft_wrap: bool = False) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None)
    console.print(text, markup=False, highlight=False, soft_wrap=soft_wrap)
    return buf.getvalue()


def test_fold_is_richs_fold_for_words_that_fit() -> None:
    rng = random.Random(7)
    checked = 0
    for _ in range(1500):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30)))
        width = rng.choice([40, 60, 80, 120])
        lines = fold(text, width)
        if lines is None:
            continue
        checked += 1
        assert "\n".join(lines) + "\n" == _rich(text, width), (text, width)
    assert checked > 1000


@pytest.mark.parametrize("text", ["two  spaces here", " leading", "a " + "y" * 90])
def test_fold_leaves_what_it_cannot_match_to_rich(text: str) -> None:
    assert fold(text, 80) is None


@pytest.mark.parametrize(
    ("text", "soft_wrap"),
    [
        ("cost $1.20  recoveries 0  created 2026-12-06 11:00", False),
        ("logs: stdout and stderr are in /var/log/spotwise/job.log on aws instance "
         "i-0123456789abcdef0 (not uploaded; gone once the instance is deleted)", False),
        ("checkpoint file:///srv/a/very/long/path/" + "d" * 90, True),
        ("reason: héllo wörld, " * 6, False),  # not ASCII: Rich prints it
        ("  two  spaces  " * 8, False),
    ],
)  # fmt: skip
def test_piped_lines_are_richs(
    text: str, soft_wrap: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = StdoutLines()
    assert not out.terminal
    out.print(text, soft_wrap=soft_wrap)
    assert capsys.readouterr().out == _rich(text, 80, soft_wrap)
