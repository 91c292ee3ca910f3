"""The shape of the tree a newcomer reads: short modules, one name per test file, a short README.

These hold the house rules that no linter checks: a source module over about 600 lines says
why in its docstring (or is split), two test files never share a name (pytest would import
one under the other's name, and a reader could not tell which `test_launch.py` failed), and
the README stays a README (the rest lives in docs/).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_PACKAGES = ("scheduler", "providers", "trainer")
LONG_MODULE_LINES = 600
# The phrase a long module's docstring carries beside its reason, so a reader sees at once
# that its length was chosen, not grown into.
LONG_MODULE_MARK = "over 600 lines"
README_MAX_LINES = 300


def _python_files(*folders: str) -> list[Path]:
    return sorted(
        p
        for folder in folders
        for p in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in p.parts and ".venv" not in p.parts
    )


def long_modules_without_a_reason(files: list[Path], root: Path = ROOT) -> list[str]:
    """Modules over LONG_MODULE_LINES lines whose docstring does not say why."""
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines <= LONG_MODULE_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if LONG_MODULE_MARK not in " ".join(doc.split()):
            found.append(f"{path.relative_to(root)}: {lines} lines, no reason in its docstring")
    return found


def test_long_source_modules_say_why() -> None:
    assert long_modules_without_a_reason(_python_files(*SOURCE_PACKAGES)) == []


def test_the_long_module_check_finds_one(tmp_path: Path) -> None:
    body = "x = 1\n" * (LONG_MODULE_LINES + 1)
    silent = tmp_path / "silent.py"
    silent.write_text('"""Does things."""\n' + body)
    said = tmp_path / "said.py"
    said.write_text('"""One table, over 600\n lines: every row in one place."""\n' + body)
    short = tmp_path / "short.py"
    short.write_text('"""Short."""\nx = 1\n')
    assert long_modules_without_a_reason([silent, said, short], tmp_path) == [
        f"silent.py: {LONG_MODULE_LINES + 2} lines, no reason in its docstring"
    ]


def test_no_two_test_files_share_a_name() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in _python_files("tests"):
        if path.name.startswith("test_"):
            by_name[path.name].append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}


def test_the_readme_stays_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"
