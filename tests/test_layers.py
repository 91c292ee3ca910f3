"""The layers you can see: each folder of `scheduler/` imports only the folders before it.

    core -> state -> daemon -> lab -> server -> cli

`core` is the pure decision code (no database, no cloud SDK, no scheduler I/O), `state` the
tables and what reads and writes them, `daemon` the loop, its controllers and the provider
wiring, `lab` the replay simulator and the benchmarks, `server` the API server and its
dashboard, `cli` the commands. `providers` never
imports `scheduler`, and `trainer` (which runs on a bare GPU box) imports neither. Every
import is read with `ast`, function-level imports included: a lazy import that runs against
the order is still a dependency, only a later one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("core", "state", "daemon", "lab", "server", "cli")
# What the lower layers (core, state) may use of `providers`: its vocabulary (value types,
# GPU and region names, settings models, the local market's on-disk layout), never an
# adapter or an SDK.
PROVIDER_VOCABULARY = {
    "providers",
    "providers.base",
    "providers.gpus",
    "providers.regions",
    "providers.settings",
    "providers.aws.settings",
    "providers.gcp.settings",
    "providers.azure.settings",
    "providers.local.settings",
    "providers.local.layout",
    "providers.masking",
    "providers.instance_output",
}
# Libraries that mean I/O the pure core must not do: a database, a cloud, a process.
NOT_IN_CORE = (
    "sqlalchemy",
    "sqlmodel",
    "alembic",
    "boto3",
    "botocore",
    "google",
    "azure",
    "apscheduler",
    "subprocess",
    "socket",
    "urllib.request",
    "http",
)


def _module(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources(package: str, root: Path = ROOT) -> list[Path]:
    return sorted(p for p in (root / package).rglob("*.py") if "data" not in p.parts)


def _imports(path: Path, root: Path = ROOT) -> Iterator[tuple[int, str]]:
    """(line, absolute module) for every import in the file, relative ones resolved."""
    me = _module(path, root)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            yield node.lineno, mod
            for alias in node.names:  # `from scheduler.core import budget` names a module
                yield node.lineno, f"{mod}.{alias.name}"


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "scheduler" or len(parts) < 2:
        return None
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else None


def _existing(module: str, root: Path = ROOT) -> bool:
    rel = Path(*module.split("."))
    return (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file()


def test_every_scheduler_module_lives_in_a_layer() -> None:
    loose = [
        p.relative_to(ROOT).as_posix()
        for p in _sources("scheduler")
        if _layer(_module(p)) is None and p.name not in ("__init__.py", "__main__.py")
    ]
    assert loose == [], f"modules outside the layer folders {LAYERS}: {loose}"


def _against_the_order(root: Path = ROOT) -> list[str]:
    wrong = []
    for path in _sources("scheduler", root):
        where = path.relative_to(root)
        mine = _layer(_module(path, root))
        if mine is None:
            mine = len(LAYERS) - 1  # scheduler/__main__.py is the command line's entry
        for line, mod in _imports(path, root):
            if not _existing(mod, root):
                continue  # `from pkg import name` also yields pkg.name, which may be no module
            theirs = _layer(mod)
            low = mine <= LAYERS.index("state")
            if (theirs is not None and theirs > mine) or (
                low and mod.split(".")[0] == "providers" and mod not in PROVIDER_VOCABULARY
            ):
                wrong.append(f"{where}:{line} ({LAYERS[mine]}) imports {mod}")
    return wrong


def test_each_layer_imports_only_the_layers_before_it() -> None:
    wrong = _against_the_order()
    assert wrong == [], "imports against the layer order:\n" + "\n".join(wrong)


def test_the_core_does_no_io() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {mod}"
        for path in _sources("scheduler/core")
        for line, mod in _imports(path)
        if mod.split(".")[0] in NOT_IN_CORE or mod in NOT_IN_CORE
    ]
    assert wrong == [], "the core imports I/O:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [("providers", ("scheduler",)), ("trainer", ("scheduler", "providers"))],
)
def test_providers_and_trainer_stand_alone(package: str, forbidden: tuple[str, ...]) -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {mod}"
        for path in _sources(package)
        for line, mod in _imports(path)
        if mod.split(".")[0] in forbidden
    ]
    assert wrong == [], f"{package} must not import {forbidden}:\n" + "\n".join(wrong)


def _graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = {_module(p, root): p for p in _sources("scheduler", root)}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for me, path in modules.items():
        for _, mod in _imports(path, root):
            if mod in modules and mod != me and not me.startswith(mod + "."):
                edges[me].add(mod)
    return edges


def _cycles(root: Path = ROOT) -> list[list[str]]:
    edges = _graph(root)
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                cycles.append([*stack[stack.index(n) :], n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    return cycles


def test_no_import_cycles_between_scheduler_modules() -> None:
    cycles = _cycles()
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_checks_find_a_wrong_import_and_a_cycle(tmp_path: Path) -> None:
    """The checks above are worth something only if they fail: in a small tree, a core module
    that imports the state layer (inside a function) and a pair that import each other."""
    files = {
        "scheduler/__init__.py": "",
        "scheduler/core/__init__.py": "",
        "scheduler/core/a.py": "def f():\n    from scheduler.state import b\n",
        "scheduler/core/c.py": "from . import d\n",
        "scheduler/core/d.py": "from scheduler.core import c\n",
        "scheduler/state/__init__.py": "",
        "scheduler/state/b.py": "import providers.aws.instances\n",
        "providers/__init__.py": "",
        "providers/aws/__init__.py": "",
        "providers/aws/instances.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert _against_the_order(tmp_path) == [
        "scheduler/core/a.py:2 (core) imports scheduler.state",
        "scheduler/core/a.py:2 (core) imports scheduler.state.b",
        "scheduler/state/b.py:1 (state) imports providers.aws.instances",
    ]
    assert _cycles(tmp_path) == [["scheduler.core.c", "scheduler.core.d", "scheduler.core.c"]]
