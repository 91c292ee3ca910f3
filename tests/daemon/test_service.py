"""`spotwise service install` and a hardened unit (systemd-analyze checks)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.cli import app as cli
from scheduler.core.errors import UserError
from scheduler.daemon import service
from scheduler.state.files import load_config

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "deploy" / "spotwise.service"
MAX_EXPOSURE = 2.0
runner = CliRunner()


def _analyze() -> str:
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install -y systemd)")
    help_text = subprocess.run([exe, "security", "--help"], capture_output=True, text=True).stdout
    if "--offline" not in help_text:
        pytest.skip("systemd-analyze is older than systemd 250 (no --offline)")
    return exe


@pytest.fixture(autouse=True)
def _no_commands(monkeypatch):
    """A staged install never runs a command on the host."""

    def refuse(report):
        raise AssertionError(f"ran commands: {report.commands}")

    monkeypatch.setattr(service, "_run", refuse)


def _tree(root: Path) -> dict[str, tuple[str, int]]:
    return {
        str(p.relative_to(root)): (p.read_text(), p.stat().st_mode & 0o777)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "install-manifest.json"
    }


def test_unit_has_the_settings_operations_rely_on():
    text = UNIT.read_text()
    settings = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#"
    )
    assert settings["Type"] == "notify" and settings["NotifyAccess"] == "main"
    assert settings["RestartPreventExitStatus"] == "2"
    assert settings["StateDirectory"] == "spotwise"
    assert settings["ConfigurationDirectory"] == "spotwise"
    assert settings["KillMode"] == "process"  # local-market jobs outlive a restart
    assert settings["RestrictAddressFamilies"] == "AF_UNIX AF_INET AF_INET6"
    assert "MemoryDenyWriteExecute" not in settings  # jobs inherit it; JIT needs W+X pages
    assert "XDG_STATE_HOME" not in text  # $STATE_DIRECTORY is the state dir under systemd


def test_unit_exposure_is_at_most_2(tmp_path):
    exe = _analyze()
    proc = subprocess.run(
        [exe, "security", "--offline=yes", "--no-pager", str(UNIT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    m = re.search(r"Overall exposure level for spotwise\.service: (\d+\.\d)", proc.stdout)
    assert m, proc.stdout + proc.stderr
    assert float(m.group(1)) <= MAX_EXPOSURE, proc.stdout


def test_installed_unit_verifies(tmp_path):
    exe = _analyze()
    service.install(tmp_path)
    unit = tmp_path / service.UNIT
    # verify checks that ExecStart exists: point it at a stub in the staging root.
    stub = tmp_path / "opt/spotwise/.venv/bin/spotwise"
    stub.parent.mkdir(parents=True)
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    unit.write_text(unit.read_text().replace("/opt/spotwise/.venv/bin/spotwise", str(stub)))
    proc = subprocess.run(
        [exe, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60
    )
    problems = [
        line for line in (proc.stdout + proc.stderr).splitlines() if "spotwise.service" in line
    ]
    assert proc.returncode == 0 and not problems, proc.stdout + proc.stderr


def test_install_into_a_staging_root_writes_everything_and_runs_nothing(tmp_path):
    r = runner.invoke(cli.app, ["service", "install", "--root", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / service.UNIT).read_text() == UNIT.read_text()
    sysusers = (tmp_path / service.SYSUSERS).read_text()
    assert re.search(r"^u spotwise - .* /var/lib/spotwise$", sysusers, re.M)
    tmpfiles = (tmp_path / service.TMPFILES).read_text()
    assert "d /var/lib/spotwise 0770 spotwise spotwise -" in tmpfiles
    assert "z /etc/spotwise/spotwise.toml 0640 root spotwise -" in tmpfiles  # daemon reads it
    config = tmp_path / service.CONFIG
    assert config.stat().st_mode & 0o777 == 0o640
    cfg = load_config(config)  # the installed config is valid and points at the unit's state
    assert str(cfg.daemon.resolved_state_dir()) == "/var/lib/spotwise"
    manifest = json.loads((tmp_path / service.MANIFEST).read_text())
    commands = [" ".join(c) for c in manifest["commands"]]
    assert "python3 -m venv /opt/spotwise/.venv" in commands
    assert any(c.startswith("/opt/spotwise/.venv/bin/pip install") for c in commands)
    assert commands[-1] == "systemctl daemon-reload"
    assert "to run (recorded in the manifest): systemctl daemon-reload" in r.stdout


def test_install_is_idempotent_and_keeps_the_operators_config(tmp_path):
    service.install(tmp_path)
    before = _tree(tmp_path)
    config = tmp_path / service.CONFIG
    again = service.install(tmp_path)
    assert again.written == [] and _tree(tmp_path) == before
    config.write_text(config.read_text() + "\n# edited by the operator\n")
    third = service.install(tmp_path)
    assert "/" + service.CONFIG in third.kept and "edited by the operator" in config.read_text()


def test_uninstall_removes_the_unit_and_keeps_config_and_state(tmp_path):
    service.install(tmp_path)
    r = runner.invoke(cli.app, ["service", "install", "--root", str(tmp_path), "--uninstall"])
    assert r.exit_code == 0, r.output
    for rel in (service.UNIT, service.SYSUSERS, service.TMPFILES):
        assert not (tmp_path / rel).exists()
    assert (tmp_path / service.CONFIG).exists()
    assert "kept /var/lib/spotwise" in r.stdout
    assert service.uninstall(tmp_path).removed == ["/" + service.MANIFEST]  # again: no-op


def test_a_real_install_needs_root(monkeypatch):
    monkeypatch.setattr(service.os, "geteuid", lambda: 1000)
    with pytest.raises(UserError, match="run it as root"):
        service.install(None)


def test_sysusers_and_tmpfiles_entries_apply_in_a_staging_root(tmp_path):
    sysusers, tmpfiles = shutil.which("systemd-sysusers"), shutil.which("systemd-tmpfiles")
    if sysusers is None or tmpfiles is None:
        pytest.skip("systemd-sysusers/systemd-tmpfiles not installed (apt-get install systemd)")
    if os.geteuid() != 0:
        pytest.skip("systemd-tmpfiles needs root to set owners")
    service.install(tmp_path)
    (tmp_path / "etc/passwd").touch()
    (tmp_path / "etc/group").touch()
    for cmd in (
        [sysusers, f"--root={tmp_path}", str(tmp_path / service.SYSUSERS)],
        [tmpfiles, f"--root={tmp_path}", "--create", str(tmp_path / service.TMPFILES)],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
    user = next(
        line.split(":")
        for line in (tmp_path / "etc/passwd").read_text().splitlines()
        if line.startswith("spotwise:")
    )
    assert user[5] == "/var/lib/spotwise" and user[6].endswith("nologin")
    uid, gid = int(user[2]), int(user[3])
    state = (tmp_path / "var/lib/spotwise").stat()
    assert (state.st_uid, state.st_gid, state.st_mode & 0o777) == (uid, gid, 0o770)
    conf = (tmp_path / service.CONFIG).stat()
    assert (conf.st_uid, conf.st_gid, conf.st_mode & 0o777) == (0, gid, 0o640)


SERVER_UNIT = REPO / "deploy" / "spotwise-server.service"


def test_the_server_unit_is_installed_beside_the_daemons_and_verifies(tmp_path):
    exe = _analyze()
    report = service.install(tmp_path)
    unit = tmp_path / service.SERVER_UNIT
    assert unit.read_text() == SERVER_UNIT.read_text()
    assert "/" + service.SERVER_UNIT in report.written
    settings = dict(
        line.split("=", 1)
        for line in unit.read_text().splitlines()
        if "=" in line and line[0] != "#"
    )
    assert settings["ExecStart"].endswith("spotwise server --config /etc/spotwise/spotwise.toml")
    assert settings["User"] == "spotwise" and settings["RestartPreventExitStatus"] == "2"
    stub = tmp_path / "opt/spotwise/.venv/bin/spotwise"
    stub.parent.mkdir(parents=True)
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    unit.write_text(unit.read_text().replace("/opt/spotwise/.venv/bin/spotwise", str(stub)))
    proc = subprocess.run(
        [exe, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60
    )
    problems = [
        line for line in (proc.stdout + proc.stderr).splitlines() if "server.service" in line
    ]
    assert proc.returncode == 0 and not problems, proc.stdout + proc.stderr
    proc = subprocess.run(
        [exe, "security", "--offline=yes", "--no-pager", str(SERVER_UNIT)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    m = re.search(r"Overall exposure level for spotwise-server\.service: (\d+\.\d)", proc.stdout)
    assert m and float(m.group(1)) <= MAX_EXPOSURE, proc.stdout
    removed = service.uninstall(tmp_path).removed
    assert "/" + service.SERVER_UNIT in removed and not unit.exists()
