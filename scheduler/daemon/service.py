"""`spotwise service install`: the daemon as a systemd service, the same way every time.

What it writes (under `root`, which is `/` for a real install and a staging directory in
tests and image builds):

  /etc/sysusers.d/spotwise.conf      the system user and group `spotwise`
  /etc/tmpfiles.d/spotwise.conf      /etc/spotwise and /var/lib/spotwise, owned and moded
  /etc/spotwise/spotwise.toml        from deploy/spotwise.toml; never overwritten once there
                                     (deploy/ ships in the package: scheduler/deploy)
  /etc/systemd/system/spotwise.service
  /etc/systemd/system/spotwise-server.service   the API server and dashboard, beside it
  /opt/spotwise/install-manifest.json   every file written and every command (to be) run

The commands (sysusers, tmpfiles, the /opt/spotwise venv and its pip install, systemctl
daemon-reload) run only in a real install as root; with --root they are only recorded in the
manifest, so a test or an image build never touches the host. Running it again changes
nothing that is already right (idempotent); --uninstall removes what install wrote except
the config and the state directory, which hold the operator's settings and the jobs' state.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from scheduler.core.errors import UserError

UNIT = "etc/systemd/system/spotwise.service"
SERVER_UNIT = "etc/systemd/system/spotwise-server.service"
SYSUSERS = "etc/sysusers.d/spotwise.conf"
TMPFILES = "etc/tmpfiles.d/spotwise.conf"
CONFIG = "etc/spotwise/spotwise.toml"
MANIFEST = "opt/spotwise/install-manifest.json"
VENV = "/opt/spotwise/.venv"
STATE_DIR = "/var/lib/spotwise"

SYSUSERS_TEXT = (
    "# spotwise daemon user (spotwise service install)\n"
    'u spotwise - "spotwise scheduler" /var/lib/spotwise\n'
)
TMPFILES_TEXT = (
    "# spotwise (spotwise service install); members of group spotwise may run the CLI\n"
    "d /etc/spotwise 0750 root spotwise -\n"
    "d /var/lib/spotwise 0770 spotwise spotwise -\n"
    "z /etc/spotwise/spotwise.toml 0640 root spotwise -\n"
)


def source_dir() -> Path:
    """The checkout this spotwise runs from (pyproject.toml lives there); in an installed
    wheel, the site-packages directory (which has no pyproject.toml)."""
    return Path(__file__).resolve().parents[2]


def deploy_text(name: str) -> str:
    """A file of deploy/ as the package ships it (scheduler/deploy links to the checkout's
    deploy/ and is package data), so a wheel install has the unit and the example config."""
    from importlib import resources

    return (resources.files("scheduler") / "deploy" / name).read_text()


def pip_target(source: Path | None = None) -> str:
    """What the service's venv installs: this checkout when running from one, else this
    same release (the wheel or URL pip recorded it was installed from, else its version)."""
    src = source or source_dir()
    if (src / "pyproject.toml").is_file():
        return str(src)
    from importlib import metadata

    try:
        dist = metadata.distribution("spotwise")
    except metadata.PackageNotFoundError:
        return "spotwise"
    direct = dist.read_text("direct_url.json")
    if direct:
        url = str(json.loads(direct).get("url", ""))
        if url.startswith("file://"):
            return url.removeprefix("file://")
        if url:
            return url
    return f"spotwise=={dist.version}"


def installed_config(example: str) -> str:
    """The example config as a production host gets it: state_dir pinned, so an operator's
    `spotwise status` (not run by systemd, no $STATE_DIRECTORY) finds the daemon's database,
    and no local market: the example's [providers.local] (a simulator whose offerings carry
    real clouds' names) is replaced by an empty [providers], so the service places nothing
    until a cloud is configured rather than running the simulated market."""
    lines = example.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "[daemon]":
            lines.insert(i + 1, f'state_dir = "{STATE_DIR}"   # the unit\'s StateDirectory=')
            break
    out = _without_local_market(lines)
    return "\n".join(out) + "\n"


NO_LOCAL_MARKET = (
    "# No local market on a production host: the daemon places jobs on the clouds configured",
    "# below, and on nothing until one is (spotwise check-config says so). The local market",
    "# is a simulator for trying spotwise on one machine (./dev demo).",
    "[providers]",
)


def _without_local_market(lines: list[str]) -> list[str]:
    """`lines` with the [providers.local] table (its header, its keys and the comment block
    just above it) replaced by NO_LOCAL_MARKET."""
    try:
        start = next(i for i, x in enumerate(lines) if x.strip() == "[providers.local]")
    except StopIteration:
        return lines
    end = start + 1
    while end < len(lines) and lines[end].strip() and not lines[end].lstrip().startswith("["):
        end += 1
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return [*lines[:start], *NO_LOCAL_MARKET, *lines[end:]]


@dataclass
class Report:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    ran: bool = False

    def lines(self) -> list[str]:
        out = [f"wrote {p}" for p in self.written] + [f"unchanged {p}" for p in self.unchanged]
        out += [f"removed {p}" for p in self.removed] + [f"kept {p}" for p in self.kept]
        verb = "ran" if self.ran else "to run (recorded in the manifest)"
        out += [f"{verb}: {' '.join(c)}" for c in self.commands]
        return out


def _put(root: Path, rel: str, text: str, mode: int, report: Report) -> None:
    path = root / rel
    if path.is_file() and path.read_text() == text:
        report.unchanged.append("/" + rel)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(path)
    report.written.append("/" + rel)


def install_commands(target: str) -> list[list[str]]:
    return [
        ["systemd-sysusers", "/" + SYSUSERS],
        ["systemd-tmpfiles", "--create", "/" + TMPFILES],
        ["python3", "-m", "venv", VENV],
        [f"{VENV}/bin/pip", "install", "--upgrade", target],
        ["systemctl", "daemon-reload"],
    ]


def install(root: Path | None, source: Path | None = None) -> Report:
    """Write the files under `root` (None: the real system, as root) and run or record the
    commands. `source`: a checkout to read deploy/ from and install (default: this one, or
    the installed package's own copy). Raises UserError for what an operator can fix."""
    real = root is None
    if real and os.geteuid() != 0:
        raise UserError("spotwise service install writes /etc and /opt: run it as root (sudo)")
    base = Path("/") if real else root
    assert base is not None
    try:
        if source is not None:
            unit = (source / "deploy" / "spotwise.service").read_text()
            server_unit = (source / "deploy" / "spotwise-server.service").read_text()
            example = (source / "deploy" / "spotwise.toml").read_text()
        else:
            unit, example = deploy_text("spotwise.service"), deploy_text("spotwise.toml")
            server_unit = deploy_text("spotwise-server.service")
    except OSError as e:
        raise UserError(
            f"cannot read {e.filename or 'deploy/spotwise.service'}: this spotwise was "
            "installed without its deploy/ files; reinstall it from a wheel or a checkout"
        ) from None
    report = Report()
    _put(base, SYSUSERS, SYSUSERS_TEXT, 0o644, report)
    _put(base, TMPFILES, TMPFILES_TEXT, 0o644, report)
    _put(base, UNIT, unit, 0o644, report)
    _put(base, SERVER_UNIT, server_unit, 0o644, report)
    if (base / CONFIG).exists():
        report.kept.append("/" + CONFIG)  # the operator's edits win over the example
    else:
        _put(base, CONFIG, installed_config(example), 0o640, report)
    report.commands = install_commands(pip_target(source))
    _write_manifest(base, report, "install")
    if real:
        _run(report)
    return report


def uninstall(root: Path | None) -> Report:
    """Remove the unit, the sysusers/tmpfiles entries and the manifest; keep the config and
    /var/lib/spotwise (the database and the local market's running jobs)."""
    real = root is None
    if real and os.geteuid() != 0:
        raise UserError("spotwise service install --uninstall changes /etc: run it as root")
    base = Path("/") if real else root
    assert base is not None
    report = Report()
    for rel in (UNIT, SERVER_UNIT, SYSUSERS, TMPFILES, MANIFEST):
        path = base / rel
        if path.exists():
            path.unlink()
            report.removed.append("/" + rel)
    report.kept += ["/" + CONFIG, STATE_DIR]
    report.commands = [
        ["systemctl", "disable", "--now", "spotwise-server.service"],
        ["systemctl", "disable", "--now", "spotwise.service"],
        ["systemctl", "daemon-reload"],
    ]
    if real:
        _run(report)
    else:
        _write_manifest(base, report, "uninstall")
    return report


def _write_manifest(base: Path, report: Report, action: str) -> None:
    doc = {
        "version": 1,
        "action": action,
        "files": sorted(report.written + report.unchanged),
        "kept": report.kept,
        "removed": report.removed,
        "commands": report.commands,
    }
    path = base / MANIFEST
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


def _run(report: Report) -> None:
    for cmd in report.commands:
        if cmd[:3] == ["python3", "-m", "venv"] and Path(VENV, "bin", "python").exists():
            continue  # the venv is there: pip install upgrades it in place
        try:
            subprocess.run(cmd, check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            raise UserError(f"{' '.join(cmd)} failed: {e}") from None
    report.ran = True
