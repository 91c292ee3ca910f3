"""Config: defaults < TOML < flags; user errors are one clear line and exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer import EXIT_USAGE
from trainer.__main__ import main
from trainer.config import ConfigError, parse_args

TINY_TOML = Path(__file__).resolve().parents[2] / "trainer" / "configs" / "tiny.toml"


def test_flags_override_toml_override_defaults(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('[training]\nsteps = 7\nprecision = "bf16"\n[checkpoint]\nasync_save = true\n')
    cfg = parse_args(["--config", str(toml), "--training.steps", "9", "--seed", "3"])
    assert cfg.training.steps == 9  # flag beats TOML
    assert cfg.training.precision == "bf16"  # TOML beats default
    assert cfg.checkpoint.async_save is True
    assert cfg.training.seed == 3  # alias
    assert cfg.model.d_model == 64  # default
    cfg = parse_args(["--debug.sigterm_ranks", "0,1", "--checkpoint.async_save", "false"])
    assert cfg.debug.sigterm_ranks == [0, 1] and cfg.checkpoint.async_save is False


def test_shipped_tiny_config_parses() -> None:
    cfg = parse_args(["--config", str(TINY_TOML)])
    assert cfg.training.steps == 300 and cfg.checkpoint.async_save


@pytest.mark.parametrize(
    ("toml", "argv", "message"),
    [
        ("[training]\nstep = 3\n", [], "unknown setting 'training.step'"),
        ("[trainig]\nsteps = 3\n", [], "unknown setting 'trainig.steps'"),
        ("[training]\nsteps = 'many'\n", [], "expected an integer"),
        ("[training\n", [], "invalid TOML"),
        ("", ["--precision", "fp8"], "training.precision must be fp32|bf16|fp16"),
        ("", ["--model.n_heads", "5"], "divisible"),
    ],
)
def test_user_errors_name_the_setting(tmp_path: Path, toml: str, argv: list[str], message: str):
    path = tmp_path / "bad.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=message.replace("|", r"\|").replace("(", r"\(")):
        parse_args(["--config", str(path), *argv])


def test_main_reports_usage_errors_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", "/nonexistent.toml"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("trainer: error: config file not found") and "Traceback" not in err


def test_bundled_config_by_name() -> None:
    assert parse_args(["--config", "tiny"]).checkpoint.interval_steps == 50


def test_every_bundled_config_parses() -> None:
    configs = sorted(TINY_TOML.parent.glob("*.toml"))
    assert {p.stem for p in configs} >= {"tiny", "hf-tiny", "hf-llama"}
    for path in configs:
        parse_args(["--config", str(path)])


def test_shipped_jobs_keep_exit_75_and_name_real_configs() -> None:
    """Every deploy/jobs example launches through `python -m trainer` (never bare torchrun,
    which turns 75 into 1) with a config that exists, or its comment says it needs a cloud."""
    import tomllib

    jobs = sorted((TINY_TOML.parents[2] / "deploy" / "jobs").glob("*.toml"))
    assert jobs
    for job in jobs:
        text = job.read_text()
        command = tomllib.loads(text)["command"]
        assert "torchrun" not in command[0] and "torch.distributed.run" not in command, job
        assert command[:3] == ["python", "-m", "trainer"], job
        config = command[command.index("--config") + 1]
        parse_args(["--config", config])  # a bundled name or path that exists and parses
        local = "local market" in text
        assert local or "NEEDS A REAL CLOUD" in text, f"{job}: say where it runs"


def test_help_lists_every_option_with_choices_and_default() -> None:
    import dataclasses

    from trainer.config import _sections, build_parser

    text = " ".join(build_parser().format_help().split())
    assert "--training.precision fp32|bf16|fp16" in text
    assert "--precision fp32|bf16|fp16" in text  # the alias too
    assert 'fp32 | bf16 | fp16 (fp16 uses a GradScaler). (default: "fp32")' in text
    assert "--training.activation_checkpointing none|full|selective" in text
    assert "--parallelism.comm_hook none|fp16|bf16|powersgd" in text
    for section, typ in _sections().items():
        for f in dataclasses.fields(typ):
            assert f"--{section}.{f.name} " in text, f.name
    assert text.count("(default: ") >= sum(len(dataclasses.fields(t)) for t in _sections().values())
