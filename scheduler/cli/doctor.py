"""`spotwise doctor`: every configured cloud checked with the operator's own credentials
before the first job, one line per check and the fix beside each problem.

What each cloud checks is its adapter's preflight (providers/<cloud>/preflight.py): identity,
every permission the adapter will use (checked without launching: EC2 DryRun, GCE
testIamPermissions, Azure's permissions list), the image in each region, the interruption
queues, prices. The checkpoint store is checked here: a small probe file is written under
`checkpoint_root` and read back (the only thing doctor writes). Exit 0 when nothing is
wrong, 1 when something is.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from scheduler.cli.common import ConfigOpt, Format, OutputOpt, out_console, print_json

commands = typer.Typer()

PROBE = ".spotwise-doctor"
CLOUDS = ("aws", "gcp", "azure")


@commands.command()
def doctor(
    cloud: Annotated[
        str | None, typer.Option(help="Check only this cloud: aws, gcp, azure")
    ] = None,
    config: ConfigOpt = None,
    output: OutputOpt = Format.table,
) -> None:
    """Check each configured cloud account and the checkpoint store before the first job."""
    from providers.preflight import Check
    from scheduler.daemon.wiring import build_providers
    from scheduler.state.files import load_config

    cfg = load_config(config)
    if cloud is not None and cloud not in CLOUDS:
        from scheduler.core.errors import UserError

        raise UserError(f"--cloud: {cloud!r} is not one of {', '.join(CLOUDS)}")
    providers = {
        name: p for name, p in build_providers(_clouds_only(cfg)).items()
        if cloud is None or name == cloud
    }  # fmt: skip
    checks: list[Check] = []
    for name, provider in providers.items():
        run = getattr(provider, "preflight", None)
        if run is None:
            continue
        try:
            checks.extend(run())
        except Exception as exc:  # one cloud's surprise must not hide the others' answers
            from providers.masking import mask_message
            from providers.preflight import Status

            checks.append(Check(name, "preflight", Status.PROBLEM,
                                mask_message(f"{type(exc).__name__}: {exc}")[:300],
                                "see the message"))  # fmt: skip
    if cloud is None:
        checks.append(_store(cfg))
    problems = [c for c in checks if c.problem]
    if output is Format.json:
        print_json({"checks": [c.as_dict() for c in checks], "problems": len(problems)})
    else:
        _print(checks, providers, problems)
    if problems:
        raise typer.Exit(1)


def _clouds_only(cfg: Any) -> Any:
    """The config without the local market: it needs no account, and doctor writes nothing
    to the state directory."""
    providers = cfg.providers.model_copy(update={"local": None})
    return cfg.model_copy(update={"providers": providers})


def _store(cfg: Any) -> Any:
    """The checkpoint store is writable: a probe written under checkpoint_root, read back."""
    from providers.preflight import Check, Status
    from scheduler.daemon.checkpoints import CheckpointStores, StoreError

    root = cfg.daemon.resolved_checkpoint_root()
    name = f"checkpoint store {root}"
    text = json.dumps({"written_by": "spotwise doctor", "at": datetime.now(UTC).isoformat()})
    stores = CheckpointStores()
    try:
        stores.write(root, PROBE, text)
        back = stores.read(root, PROBE)
    except StoreError as exc:
        return Check(
            "store", name, Status.PROBLEM, str(exc),
            "give the daemon write access to it (and every cloud's instance role too)",
        )  # fmt: skip
    if back != text:
        return Check("store", name, Status.PROBLEM, "the probe read back differs", "see the store")
    return Check("store", name, Status.OK, f"{PROBE} written and read back")


def _print(checks: list[Any], providers: dict[str, Any], problems: list[Any]) -> None:
    console = out_console()
    if not providers:
        console.print(
            "no cloud is configured ([providers.aws], [providers.gcp], [providers.azure])"
        )
    for c in checks:
        mark = {"ok": "ok", "problem": "PROBLEM", "skipped": "skipped"}[c.status.value]
        line = f"{mark:<8}{c.cloud:<7}{c.name}: {c.detail}"
        if c.problem and c.fix:
            line += f" -- fix: {c.fix}"
        console.print(line, markup=False, highlight=False, soft_wrap=False)
    if problems:
        console.print(f"{len(problems)} problem(s); fix them before the first job", markup=False)
    else:
        console.print("no problems: ready for the first job", markup=False)
