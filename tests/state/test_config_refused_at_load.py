"""What cannot work is refused when the file is read, by `check-config` and every command
alike: relative paths, schemes no store speaks, a speedup or interval out of its range, a
database URL the engine cannot parse and a state directory that cannot be created. Each is
one line naming the file, the key and its line, exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.core.config import parse_config
from scheduler.core.errors import UserError
from scheduler.state.files import load_config, load_jobspec


def _refused(tmp_path: Path, text: str) -> str:
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(text)
    with pytest.raises(UserError) as e:
        load_config(cfg)
    (line,) = str(e.value).splitlines()
    assert line.startswith(f"{cfg}: ")
    return line


def test_relative_paths_are_refused_with_the_fix(tmp_path: Path) -> None:
    line = _refused(tmp_path, '[daemon]\ncheckpoint_root = "ckpt"\n')
    assert "daemon.checkpoint_root (line 2)" in line and "relative" in line and "/" in line
    line = _refused(tmp_path, '[daemon]\nstate_dir = "state"\n')
    assert "daemon.state_dir (line 2)" in line and "absolute path" in line
    line = _refused(tmp_path, '[providers.local]\nstate_dir = "market"\n')
    assert "providers.local.state_dir (line 2)" in line
    job = tmp_path / "job.toml"
    job.write_text('name = "j"\ncommand = ["x"]\ncheckpoint = "./ckpt/run"\n')
    with pytest.raises(UserError, match=r"checkpoint \(line 3\): .*relative"):
        load_jobspec(job)


def test_unsupported_schemes_are_refused_with_the_supported_ones(tmp_path: Path) -> None:
    line = _refused(tmp_path, '[daemon]\ncheckpoint_root = "ftp://host/ckpt"\n')
    assert "'ftp://'" in line
    for scheme in ("s3://", "gs://", "az://", "file:///"):
        assert scheme in line
    job = tmp_path / "job.toml"
    job.write_text('name = "j"\ncommand = ["x"]\ncheckpoint = "mysql://db/x"\n')
    with pytest.raises(UserError, match=r"checkpoint \(line 3\): unsupported .*gs://"):
        load_jobspec(job)
    # The clouds' own stores are accepted.
    for uri in ("gs://bucket/ckpt", "az://ckpt@account/runs", "s3://bucket/p", "/srv/ckpt"):
        parse_config(f'[daemon]\ncheckpoint_root = "{uri}"\n')


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[providers.local]\nspeedup = 1e30\n", "providers.local.speedup"),
        ("[providers.local]\nspeedup = 1e-300\n", "providers.local.speedup"),
        ('[daemon]\nreconcile_interval = "30d"\n', "daemon.reconcile_interval"),
        ('[daemon]\nprice_interval = "3650d"\n', "daemon.price_interval"),
        ('[daemon]\naccrue_interval = "10ms"\n', "daemon.accrue_interval"),
    ],
)
def test_speedup_and_intervals_have_a_range(tmp_path: Path, text: str, key: str) -> None:
    line = _refused(tmp_path, text)
    assert f"{key} (line 2)" in line


def test_the_engine_and_the_file_system_are_asked_at_load(tmp_path: Path) -> None:
    line = _refused(tmp_path, '[daemon]\ndatabase_url = "postgresql://u:pw@h:port/db"\n')
    assert "daemon.database_url (line 2)" in line and "pw" not in line
    line = _refused(tmp_path, '[daemon]\ndatabase_url = "sqlite:///relative.db"\n')
    assert "daemon.database_url (line 2)" in line and "relative" in line
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    line = _refused(tmp_path, f'[daemon]\nstate_dir = "{blocker}/state"\n')
    assert "daemon.state_dir (line 2)" in line and "not a directory" in line
    line = _refused(tmp_path, f'[providers.local]\nstate_dir = "{blocker}/m"\n')
    assert "providers.local.state_dir (line 2)" in line
    assert not (blocker.parent / "state").exists()  # reading the config created nothing


@pytest.mark.slow
def test_check_config_and_the_commands_refuse_alike(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cfg = tmp_path / "spotwise.toml"
    cfg.write_text(f'[daemon]\nstate_dir = "{blocker}/state"\ncheckpoint_root = "ftp://x/y"\n')
    for argv in (["check-config", str(cfg)], ["status", "-c", str(cfg)]):
        r = subprocess.run(
            [sys.executable, "-m", "scheduler", *argv],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2, r.stderr
        assert "Traceback" not in r.stderr and "daemon.checkpoint_root (line 3)" in r.stderr
