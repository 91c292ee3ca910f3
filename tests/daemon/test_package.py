"""deploy/ (the unit, the example config, the job files) ships in the package, so
`spotwise service install` works from an installed wheel, not only from a checkout."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from scheduler.daemon import service

REPO = Path(__file__).resolve().parents[2]


def _deploy_files() -> list[str]:
    root = REPO / "deploy"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_every_deploy_file_is_package_data():
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["scheduler"]
    files = _deploy_files()
    assert "spotwise.service" in files and "spotwise.toml" in files
    missing = [f for f in files if not any(fnmatch.fnmatch(f"deploy/{f}", p) for p in patterns)]
    assert missing == []
    assert service.deploy_text("spotwise.service") == (REPO / "deploy/spotwise.service").read_text()


@pytest.mark.slow
def test_service_install_from_a_built_wheel(tmp_path):
    """Build the wheel from a copy of the source, install it into a bare directory and run
    service install from there (away from any checkout)."""
    src = tmp_path / "src"
    for name in ("scheduler", "providers", "trainer", "deploy"):
        shutil.copytree(REPO / name, src / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    dist = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)],
        check=True, capture_output=True, timeout=240,
    )  # fmt: skip
    (wheel,) = dist.glob("spotwise-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"scheduler/deploy/{f}" for f in _deploy_files()} <= names
    site = tmp_path / "site"
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
        check=True, capture_output=True, timeout=240,
    )  # fmt: skip
    root = tmp_path / "root"
    code = (
        "import json, sys; from pathlib import Path; from scheduler.daemon import service;"
        "assert 'site' in service.__file__, service.__file__;"
        "r = service.install(Path(sys.argv[1])); print(json.dumps(r.commands))"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=120,
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (root / service.UNIT).read_text() == (REPO / "deploy/spotwise.service").read_text()
    assert "[daemon]" in (root / service.CONFIG).read_text()
    pip_install = next(c for c in json.loads(proc.stdout) if c[1:3] == ["install", "--upgrade"])
    assert pip_install[-1] == str(wheel)  # the same release, not a checkout that is not there
