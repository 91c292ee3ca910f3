"""The docs say what the code does, and only that.

A reader copies commands from README.md and docs/ as printed, sets the config keys they
name and looks modules up in the module map; each of those drifts silently when the code
moves. So every `spotwise ...` and `./dev ...` command the docs show must resolve in the
real CLI with options it has, every config and job key they name must exist in the models
(and every key of the models must be documented), every module under `scheduler/` and
`providers/` must be in the module map, and links between the docs must land. No tracked
file carries a milestone word, and no document a test count: both are true only on the day
they are written.

The CLI is read from its Typer app (no subprocess); the config keys from the pydantic
models. Each failure names the file, the line and what is missing.
"""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import tomllib
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve()
SOURCE_FOLDERS = ("scheduler", "providers")
# What a reader copies from: the README and every page under docs/.
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
# Config examples also live in each cloud adapter's README.
CONFIG_EXAMPLES = sorted([*DOCS, *ROOT.glob("providers/*/README.md")])
ARCHITECTURE = ROOT / "docs" / "architecture.md"
CONFIGURATION = ROOT / "docs" / "configuration.md"
JOB_FILES = ROOT / "docs" / "job-files.md"
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}

# Words that only mean something on the day they were written.
MILESTONE_WORDS = (
    r"\bstops? \d+\b",  # "stop 29", "stops 25 to 27"
    r"\bcore v\d+\b",
    r"\bissue #?\d+\b",
    r"\bthe issue\b",  # "the target", "named in the issue"
    r"\badded at\b",
)
TEST_COUNTS = (
    r"\b\d[\d,]*\s+(?:of\s+\d[\d,]*\s+)?(?:tests|test cases)\b",  # "859 tests", "563 of 859 tests"
    r"\b\d[\d,]*\s+(?:passed|failed|skipped|deselected)(?=,|\s+in\s+[\d.]+\s*s\b)",  # pytest's
)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# -- reading markdown ---------------------------------------------------------------------------
def _fenced(text: str) -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """(language, [(line number, line)]) of every fenced block."""
    lang: str | None = None
    body: list[tuple[int, str]] = []
    for n, line in enumerate(text.splitlines(), 1):
        fence = re.match(r"^\s*```(\S*)", line)
        if fence and lang is None:
            lang, body = fence.group(1).lower(), []
        elif fence:
            yield lang, body
            lang = None
        elif lang is not None:
            body.append((n, line))


def _prose(text: str) -> Iterator[tuple[int, str]]:
    """Lines outside fenced blocks."""
    inside = False
    for n, line in enumerate(text.splitlines(), 1):
        if re.match(r"^\s*```", line):
            inside = not inside
        elif not inside:
            yield n, line


def _inline_code(text: str) -> Iterator[tuple[int, str]]:
    for n, line in _prose(text):
        for m in re.finditer(r"`([^`]+)`", line):
            yield n, m.group(1)


def _sections(text: str) -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """(heading, [(line number, line)]) for every heading, fenced blocks included."""
    heading, body = "", []
    inside = False
    for n, line in enumerate(text.splitlines(), 1):
        if re.match(r"^\s*```", line):
            inside = not inside
        if not inside and line.startswith("#"):
            yield heading, body
            heading, body = line, []
        else:
            body.append((n, line))
    yield heading, body


def _first_cells(lines: list[tuple[int, str]]) -> Iterator[tuple[int, list[str]]]:
    """The backticked names in the first cell of each table row."""
    for n, line in lines:
        m = re.match(r"^\|([^|]*)\|", line)
        if m and not re.fullmatch(r"[\s:-]*", m.group(1)):
            yield n, re.findall(r"`([^`]+)`", m.group(1))


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"^#+\s*", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading, _ in _sections(path.read_text()):
        if not heading:
            continue
        slug = github_slug(heading)
        k = seen.get(slug, 0)
        seen[slug] = k + 1
        out.add(slug if k == 0 else f"{slug}-{k}")
    return out


# -- the CLI ------------------------------------------------------------------------------------
class Command:
    """One command of the real CLI: its options (and which take a value) and subcommands."""

    def __init__(self, click_command: Any, parent_ctx: Any = None) -> None:
        self.name = click_command.name
        self.takes_value: dict[str, bool] = {}
        for p in click_command.params:
            if p.param_type_name != "option":
                continue
            flag = bool(getattr(p, "is_flag", False) or getattr(p, "count", False))
            for opt in [*p.opts, *p.secondary_opts]:
                self.takes_value[opt] = not flag
        self.takes_value.setdefault("--help", False)
        self.subcommands: dict[str, Command] | None = None
        if hasattr(click_command, "list_commands"):  # a group (Typer may vendor Click)
            ctx = click_command.context_class(click_command, parent=parent_ctx)
            self.subcommands = {
                name: Command(click_command.get_command(ctx, name), ctx)
                for name in click_command.list_commands(ctx)
            }


@functools.cache
def cli() -> Command:
    """The app behind the `spotwise` console script, as pyproject.toml declares it."""
    import importlib

    import typer

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module_name = scripts["spotwise"].split(":")[0]
    module = importlib.import_module(module_name)
    app = getattr(module, "app", None)
    assert isinstance(app, typer.Typer), f"{module_name} has no Typer `app` to read commands from"
    return Command(typer.main.get_command(app))


# `./dev X` runs `spotwise X`, except these, which it handles itself.
DEV_OWN = {"test": None, "lint": (), "help": (), "-h": (), "--help": ()}
_SEPARATORS = {"|", "||", "&&", ";", "&", "(", ")", ";;"}
_REDIRECTS = {"<", ">", ">>", "<<", "<<<", ">&", "<&", "&>", "2>", "2>&1"}


def _simple_commands(line: str) -> Iterator[list[str]]:
    """The simple commands of a shell line, as word lists, redirections dropped."""
    try:
        lex = shlex.shlex(line, posix=True, punctuation_chars=";&<>()")
        lex.whitespace_split = True
        words = list(lex)
    except ValueError:  # an unbalanced quote in prose: fall back to plain words
        words = line.split("#")[0].split()
    command: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
        elif w in _SEPARATORS:
            if command:
                yield command
            command = []
        elif w in _REDIRECTS:
            skip = True
        else:
            command.append(w)
    if command:
        yield command


def _program(words: list[str]) -> list[str] | None:
    """`spotwise ...` with the program's path and prefixes (sudo, VAR=...) taken off; a
    `./dev` line as the spotwise command it runs; None for anything else."""
    i = 0
    while i < len(words):
        w = words[i]
        if re.match(r"^[A-Za-z_]\w*=", w) or w in ("env", "exec", "time", "nohup"):
            i += 1
        elif w == "sudo":
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 2 if words[i] in ("-u", "-g") else 1
        else:
            break
    if i >= len(words):
        return None
    head, rest = words[i], words[i + 1 :]
    if head.rsplit("/", 1)[-1] == "spotwise":
        return ["spotwise", *rest]
    if head == "./dev":
        if not rest or rest[0] in DEV_OWN:
            return None  # ./dev test passes pytest's own options; lint and help take none
        return ["spotwise", *rest]
    return None


def check_command(argv: list[str], node: Command | None = None) -> list[str]:
    """Problems with `spotwise ...` as the docs write it ([...] optional, a|b choices)."""
    node = node or cli()
    path = [node.name or "spotwise"]
    words = [w.strip("[]") for w in argv[1:]]
    words = [w for w in words if w and w not in ("...", "|")]
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("-") and w != "-":
            name = w.split("=", 1)[0]
            if name not in node.takes_value:
                return [f"`{' '.join(path)}` has no option {name}"]
            if node.takes_value[name] and "=" not in w:
                i += 1  # its value
        elif node.subcommands is not None:
            problems = []
            for alt in w.split("|"):
                sub = node.subcommands.get(alt)
                if sub is None:
                    problems.append(f"`{' '.join(path)}` has no command {alt!r}")
                else:
                    problems += check_command(["spotwise", *words[i + 1 :]], _rooted(sub, path))
            return problems
        i += 1
    return []


def _rooted(sub: Command, path: list[str]) -> Command:
    """`sub` named by its whole path, for messages."""
    named = object.__new__(Command)
    named.__dict__.update(sub.__dict__)
    named.name = " ".join([*path, sub.name])
    return named


def _shell_lines(text: str) -> Iterator[tuple[int, str]]:
    """Command lines of the shell blocks: continuations joined, heredoc bodies left out."""
    for lang, body in _fenced(text):
        if lang not in SHELL_LANGUAGES:
            continue
        until: str | None = None
        pending, start = "", 0
        for n, line in body:
            if until is not None:
                if line.strip() == until:
                    until = None
                continue
            if not pending:
                start = n
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            yield start, pending + line
            pending = ""
            heredoc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
            if heredoc:
                until = heredoc.group(1)


def command_problems(path: Path) -> list[str]:
    text = path.read_text()
    where = _rel(path)
    lines = list(_shell_lines(text))
    lines += [
        (n, code) for n, code in _inline_code(text) if re.match(r"(\S*/)?spotwise |\./dev ", code)
    ]
    out = []
    for n, line in lines:
        for words in _simple_commands(line):
            argv = _program(words)
            if argv is not None:
                out += [f"{where}:{n}: {p}  ({line.strip()})" for p in check_command(argv)]
    return out


# -- config and job keys ------------------------------------------------------------------------
def _fields(model: Any) -> set[str]:
    out = set()
    for name, f in model.model_fields.items():
        out.add(name)
        alias = f.validation_alias
        out.update(getattr(alias, "choices", None) or ([alias] if isinstance(alias, str) else []))
    return out


def _submodel(annotation: Any) -> Any:
    for a in [annotation, *typing.get_args(annotation)]:
        for b in [a, *typing.get_args(a)]:
            if isinstance(b, type) and hasattr(b, "model_fields"):
                return b
    return None


@functools.cache
def config_sections() -> dict[str, set[str]]:
    """'daemon' -> its keys, 'providers.aws' -> ..., from the Config model."""
    from scheduler.core.config import Config

    out: dict[str, set[str]] = {}

    def walk(model: Any, prefix: str) -> None:
        for name, f in model.model_fields.items():
            sub = _submodel(f.annotation)
            if sub is None:
                continue
            section = f"{prefix}{name}"
            if any(_submodel(g.annotation) for g in sub.model_fields.values()):
                walk(sub, section + ".")  # providers: a table of tables
            else:
                out[section] = _fields(sub)

    walk(Config, "")
    return out


@functools.cache
def job_keys() -> set[str]:
    from scheduler.core.jobspec import JobSpec

    return _fields(JobSpec)


_HEADER = re.compile(r"^\s*\[\[?\s*([\w.]+)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*#?\s*([a-z_][a-z0-9_]*)\s*=")


def _toml_snippets(text: str) -> Iterator[list[tuple[int, str]]]:
    """The TOML of every toml block and of every heredoc in a shell block."""
    for lang, body in _fenced(text):
        if lang == "toml":
            yield body
        elif lang in SHELL_LANGUAGES:
            snippet: list[tuple[int, str]] | None = None
            until = ""
            for n, line in body:
                if snippet is not None:
                    if line.strip() == until:
                        yield snippet
                        snippet = None
                    else:
                        snippet.append((n, line))
                    continue
                heredoc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
                if heredoc:
                    snippet, until = [], heredoc.group(1)


def key_problems(path: Path) -> list[str]:
    """Keys in toml examples and `[section] key` mentions that the models do not have."""
    text = path.read_text()
    where = _rel(path)
    sections = config_sections()
    out = []
    for snippet in _toml_snippets(text):
        has_sections = any(_HEADER.match(line) for _, line in snippet)
        section: str | None = None
        for n, line in snippet:
            header = _HEADER.match(line)
            if header:
                section = header.group(1)
                if section not in sections:
                    out.append(f"{where}:{n}: no config section [{section}]")
                continue
            key = _KEY.match(line)
            if not key:
                continue
            if not has_sections:
                if key.group(1) not in job_keys():
                    out.append(f"{where}:{n}: a job file has no key {key.group(1)!r}")
            elif section in sections and key.group(1) not in sections[section]:
                out.append(f"{where}:{n}: [{section}] has no key {key.group(1)!r}")
    mention = re.compile(r"^\[\[?([\w.]+)\]\]?\s+([a-z_][a-z0-9_]*)$|^(daemon|policy)\.([a-z_]+)$")
    for n, code in _inline_code(text):
        m = mention.match(code.strip())
        if not m:
            continue
        section, key = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        if key in ("py", "md", "toml"):  # a file (`daemon.py`), not a key
            continue
        if key not in sections.get(section, set()):
            out.append(f"{where}:{n}: [{section}] has no key {key!r}")
    return out


def _section_tables(path: Path) -> dict[str, dict[str, int]]:
    """For each heading naming a config section (`[daemon]`), its table's keys and lines."""
    out: dict[str, dict[str, int]] = {}
    for heading, body in _sections(path.read_text()):
        m = re.search(r"`\[\[?([\w.]+)\]\]?`", heading)
        if m:
            keys = out.setdefault(m.group(1), {})
            for n, names in _first_cells(body):
                for name in names:
                    keys.setdefault(name, n)
    return out


def _job_table(path: Path) -> dict[str, int]:
    for heading, body in _sections(path.read_text()):
        if heading.strip() == "## Keys":
            return {name: n for n, names in _first_cells(body) for name in names}
    return {}


# -- the module map -----------------------------------------------------------------------------
def source_modules() -> set[str]:
    """Every module under scheduler/ and providers/ (Alembic's revisions by their folder)."""
    out = set()
    for folder in SOURCE_FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            rel = _rel(path)
            if "__pycache__" in rel or path.name == "__init__.py":
                continue
            if "/migrations/versions/" in rel:
                continue
            out.add(rel)
    return out


def mapped_modules() -> dict[str, int]:
    """Modules docs/architecture.md's module map names: `folder/` headings, `file.py` rows."""
    text = ARCHITECTURE.read_text()
    out: dict[str, int] = {}
    in_map = False
    folder = None
    for heading, body in _sections(text):
        if heading.startswith("## "):
            in_map = heading.strip() == "## Module map"
            folder = None
        if not in_map:
            continue
        m = re.match(r"^###\s+`([\w/]+/)`", heading)
        if m:
            folder = m.group(1)
        if folder is None:
            continue
        for n, names in _first_cells(body):
            for name in names:
                if name.endswith(".py"):
                    out.setdefault(folder + name, n)
    return out


def readme_map() -> str:
    """The code block of the README's "How it works": the folder map."""
    text = (ROOT / "README.md").read_text()
    part = text[text.index("## How it works") :]
    block = re.search(r"```\n(.*?)```", part, re.S)
    assert block is not None, "README.md: no folder map in 'How it works'"
    return block.group(1)


def package_folders() -> set[str]:
    """Packages directly under scheduler/ and providers/, and one level below those."""
    out = set()
    for folder in SOURCE_FOLDERS:
        for init in (ROOT / folder).glob("*/__init__.py"):
            out.add(_rel(init.parent))
        for init in (ROOT / folder).glob("*/*/__init__.py"):
            out.add(_rel(init.parent))
    return out


# -- links --------------------------------------------------------------------------------------
def link_problems(path: Path) -> list[str]:
    """Relative links (and their #anchors) that do not land."""
    out = []
    where = _rel(path)
    for n, line in _prose(path.read_text()):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"^[a-z]+:", target):
                continue  # http:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                out.append(f"{where}:{n}: link to a missing file: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                out.append(f"{where}:{n}: no heading #{anchor} in {_rel(dest)}")
    return out


def _tracked_text_files() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    out = []
    for name in names:
        path = ROOT / name
        if not name or not path.is_file() or path.resolve() == THIS:
            continue
        try:
            text = path.read_bytes()[:200_000].decode("utf-8")
        except UnicodeDecodeError:
            continue  # binary
        if "\0" not in text:
            out.append(path)
    return out


# -- the tests ----------------------------------------------------------------------------------
def test_every_command_and_option_the_docs_show_exists() -> None:
    problems = [p for path in DOCS for p in command_problems(path)]
    assert not problems, "\n".join(problems)


def test_every_config_and_job_key_the_docs_name_exists() -> None:
    problems = [p for path in CONFIG_EXAMPLES for p in key_problems(path)]
    sections = config_sections()
    for section, keys in _section_tables(CONFIGURATION).items():
        where = _rel(CONFIGURATION)
        if section not in sections:
            problems.append(f"{where}: no config section [{section}]")
            continue
        problems += [
            f"{where}:{n}: [{section}] has no key {key!r}"
            for key, n in keys.items()
            if key not in sections[section]
        ]
    problems += [
        f"{_rel(JOB_FILES)}:{n}: a job file has no key {key!r}"
        for key, n in _job_table(JOB_FILES).items()
        if key not in job_keys()
    ]
    assert not problems, "\n".join(problems)


def test_every_config_and_job_key_is_documented() -> None:
    from scheduler.core.config import Config
    from scheduler.core.jobspec import JobSpec

    tables = _section_tables(CONFIGURATION)
    problems = []
    for section in config_sections():
        model: Any = Config
        for part in section.split("."):
            model = _submodel(model.model_fields[part].annotation)
        documented = tables.get(section, {})
        problems += [
            f"{_rel(CONFIGURATION)}: [{section}] {key} is not in the `[{section}]` table"
            for key in model.model_fields
            if key not in documented
        ]
    jobs = _job_table(JOB_FILES)
    problems += [
        f"{_rel(JOB_FILES)}: job key {key} is not in the '## Keys' table"
        for key in JobSpec.model_fields
        if key not in jobs
    ]
    assert not problems, "\n".join(problems)


def test_the_module_map_names_every_module() -> None:
    """One rule: docs/architecture.md's module map names every module by file, under a
    `### \\`folder/\\`` heading; the README's folder map names every package folder."""
    mapped = mapped_modules()
    have = source_modules()
    where = _rel(ARCHITECTURE)
    problems = [
        f"{where}: the module map does not name {m} (add a row under ### `{m.rsplit('/', 1)[0]}/`)"
        for m in sorted(have - set(mapped))
    ]
    problems += [
        f"{where}:{mapped[m]}: the module map names {m}, which does not exist"
        for m in sorted(set(mapped) - have)
    ]
    folder_map = readme_map()
    problems += [
        f"README.md: the folder map does not name {folder}/"
        for folder in sorted(package_folders())
        if not re.search(rf"(^|\s){re.escape(folder.rsplit('/', 1)[-1])}/", folder_map, re.M)
    ]
    assert not problems, "\n".join(problems)


def test_links_between_the_docs_land() -> None:
    problems = [p for path in DOCS for p in link_problems(path)]
    for path in sorted((ROOT / "scheduler").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for doc, anchor in re.findall(r"(docs/[\w/.-]+\.md)#([\w-]+)", line):
                if not (ROOT / doc).exists():
                    problems.append(f"{_rel(path)}:{n}: no file {doc}")
                elif anchor not in _anchors(ROOT / doc):
                    problems.append(f"{_rel(path)}:{n}: no heading #{anchor} in {doc}")
    assert not problems, "\n".join(problems)


def test_no_milestone_words_in_any_tracked_file() -> None:
    pattern = re.compile("|".join(MILESTONE_WORDS), re.I)
    problems = [
        f"{_rel(path)}:{n}: {m.group(0)!r}: name the thing for what it is"
        for path in _tracked_text_files()
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        for m in [pattern.search(line)]
        if m
    ]
    assert not problems, "\n".join(problems)


def test_no_test_counts_in_any_document() -> None:
    pattern = re.compile("|".join(TEST_COUNTS), re.I)
    docs = {*DOCS, *(p for p in _tracked_text_files() if p.suffix == ".md")}
    problems = [
        f"{_rel(path)}:{n}: {m.group(0)!r}: a count is true only the day it is written"
        for path in sorted(docs)
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for m in [pattern.search(line)]
        if m
    ]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["spotwise", "status", "--watch", "-o", "json"], None),
        (["spotwise", "bench", "deadline|placement|daemon", "[-o", "json]"], None),
        (["spotwise", "status", "--colour"], "`spotwise status` has no option --colour"),
        (["spotwise", "db", "downgrade"], "`spotwise db` has no command 'downgrade'"),
        (["spotwise", "bench", "deadline", "--sweep", "--nope"], "no option --nope"),
    ],
)
def test_the_command_check_tells_what_is_missing(argv: list[str], problem: str | None) -> None:
    got = check_command(argv)
    if problem is None:
        assert got == []
    else:
        assert len(got) == 1 and problem in got[0]


def test_shell_lines_are_read_as_a_shell_would() -> None:
    commands = [
        _program(w)
        for line in (
            "sudo -u spotwise /opt/spotwise/.venv/bin/spotwise db upgrade   # note",
            "sleep 5; spotwise daemon -c /tmp/a.toml & A=$!",
            "spotwise status -o json | jq .daemon",
            "journalctl -u spotwise -f",
            "./dev <command>",
        )
        for w in _simple_commands(line)
    ]
    assert [c for c in commands if c] == [
        ["spotwise", "db", "upgrade"],
        ["spotwise", "daemon", "-c", "/tmp/a.toml"],
        ["spotwise", "status", "-o", "json"],
    ]


# -- a fresh clone ------------------------------------------------------------------------------
ACTIVATE = ". .venv/bin/activate"


def parse_fully(argv: list[str]) -> str | None:
    """None when the real CLI's parser takes `argv` (a literal command line: its command,
    subcommand, arguments and options, each value checked by click); else click's message."""
    import click
    import typer

    from scheduler.cli.app import app

    command: Any = typer.main.get_command(app)
    words = list(argv[1:])
    name: str | None = "spotwise"
    ctx = None
    try:
        while True:
            ctx = command.make_context(name or "spotwise", words, parent=ctx)
            if not isinstance(command, click.Group):
                return None
            rest = [*getattr(ctx, "protected_args", []), *ctx.args]
            name, command, words = command.resolve_command(ctx, rest)
    except click.exceptions.Exit:
        return None
    except click.ClickException as e:
        return e.format_message()


def _shell_blocks(text: str) -> list[list[tuple[int, str]]]:
    return [body for lang, body in _fenced(text) if lang in SHELL_LANGUAGES]


def test_every_readme_example_runs_from_a_fresh_clone() -> None:
    """A bare `spotwise` is not on the PATH after `./dev demo`: the README says the one line
    that puts it there right after the Quick start, and no shell block before that line
    uses it; every file an example names exists."""
    text = (ROOT / "README.md").read_text()
    quick = text[: text.index("## Quick start")].count("\n") + 1
    using = text[: text.index("## Using it")].count("\n") + 1
    # A line to copy, in a shell block (prose is not pasted into a shell).
    shown = [n for n, line in _shell_lines(text) if line.strip().startswith(ACTIVATE)]
    assert shown, f"README.md: no shell block with `{ACTIVATE}`"
    line_of_activation = shown[0]
    assert quick < line_of_activation < using, "the activation belongs right after Quick start"
    problems = []
    for n, line in _shell_lines(text):
        for words in _simple_commands(line):
            if words and words[0] == "spotwise" and n < line_of_activation:
                problems.append(f"README.md:{n}: bare `spotwise` before `{ACTIVATE}`: {line}")
            for w in words:
                if (
                    re.fullmatch(r"(deploy|docs|scripts)/[\w./-]+\.\w+", w)
                    and not (ROOT / w).exists()
                ):
                    problems.append(f"README.md:{n}: no file {w}")
    assert not problems, "\n".join(problems)


def test_your_first_own_job_is_four_real_commands() -> None:
    """Right after the activation line: four commands that parse as the real CLI parses
    them, on a job file that validates, the last following the job it submitted."""
    from scheduler.state.files import load_jobspec

    blocks = _shell_blocks((ROOT / "README.md").read_text())
    at = next(i for i, b in enumerate(blocks) if any(ACTIVATE in line for _, line in b))
    first_job = [line for _, line in blocks[at + 1] if line.strip()]
    assert len(first_job) == 4, first_job
    argvs = [a for line in first_job for w in _simple_commands(line) if (a := _program(w))]
    assert len(argvs) == 4, argvs
    problems = [f"{' '.join(a)}: {p}" for a in argvs if (p := parse_fully(a))]
    assert not problems, "\n".join(problems)
    job_file = next(w for w in argvs[1] if w.endswith(".toml"))
    spec = load_jobspec(ROOT / job_file)
    assert argvs[0][1] == "daemon" and "--dry-run" in argvs[1] and argvs[2][1] == "submit"
    assert argvs[3][:3] == ["spotwise", "logs", spec.name] and "-f" in argvs[3]


def test_the_demo_hints_are_runnable_as_printed(tmp_path: Path, monkeypatch: Any) -> None:
    """What the demo's last lines suggest parses as a real command, with the program as
    the demo was started (./dev) and the demo's own job names, no placeholders."""
    from scheduler.lab.demo import hint_commands

    monkeypatch.setenv("SPOTWISE_PROG", "./dev")
    hints = hint_commands(tmp_path / "spotwise.toml", ["train-v100", "finetune-t4"])
    assert hints and all(h.startswith("./dev ") and "<" not in h for h in hints)
    assert (ROOT / "dev").stat().st_mode & 0o111
    problems = []
    for h in hints:
        for words in _simple_commands(h):
            argv = _program(words)
            assert argv is not None, h
            if p := parse_fully(argv):
                problems.append(f"{h}: {p}")
    assert not problems, "\n".join(problems)
    monkeypatch.delenv("SPOTWISE_PROG")
    monkeypatch.setenv("PATH", str(tmp_path))  # no spotwise on the PATH: the Python's -m
    assert all(" -m scheduler " in h for h in hint_commands(tmp_path / "c.toml", ["x"]))
