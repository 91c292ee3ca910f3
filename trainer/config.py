"""Nested dataclass configuration: defaults < TOML file < command-line flags.

Every field is reachable as ``--section.field VALUE`` (torchtitan style), a few common ones
also have short aliases (``--precision``, ``--steps``, ``--checkpoint-uri``...). Unknown keys
are errors that name the file/flag, so a typo never silently trains the wrong thing.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import itertools
import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from trainer import contract


class ConfigError(ValueError):
    """A user-caused configuration error; printed as one line, never a traceback."""


@dataclass
class ModelConfig:
    """The model: a factory ``pkg.module:function(cfg, dataset) -> nn.Module``.

    The bundled factory builds a character-level causal transformer from the fields below;
    a user factory reads whatever it needs (``options`` is a free-form table for it).
    """

    factory: str = "trainer.model:build"
    """Import path ``pkg.module:function``; called as ``function(cfg, dataset)``."""
    options: dict[str, Any] = field(default_factory=dict)
    """Free-form ``[model.options]`` table for the factory (a JSON object on the command line)."""
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    seq_len: int = 64
    dropout: float = 0.1


@dataclass
class DataConfig:
    """The dataset: a factory ``pkg.module:function(cfg) -> map-style Dataset``."""

    factory: str = "trainer.data:build"
    """Import path ``pkg.module:function``; called as ``function(cfg)``."""
    options: dict[str, Any] = field(default_factory=dict)
    """Free-form ``[data.options]`` table for the factory (a JSON object on the command line)."""
    source: str = "synthetic"
    """Bundled factory: ``synthetic``, a token file ``*.bin``, or a UTF-8 text file path."""
    synthetic_chars: int = 200_000
    """Length of the generated corpus."""
    token_dtype: str = "uint16"
    """Token file element type."""
    vocab_size: int = 0
    """Token file vocabulary size (required for .bin)."""
    epoch_samples: int = 0
    """Samples per epoch; 0 means the whole dataset."""
    shuffle: bool = True
    """A fresh permutation per epoch from (seed, epoch); false walks the dataset in order."""
    num_workers: int = 2
    """DataLoader worker processes (0: load in the training process)."""
    prefetch_factor: int = 2
    """Micro-batches each worker loads ahead."""


@dataclass
class TrainingConfig:
    steps: int = 300
    """Total optimizer steps."""
    global_batch_size: int = 16
    """Sequences per step summed over ranks; fixed across world sizes (see README resume rule)."""
    micro_batch_size: int = 0
    """Sequences per forward/backward per rank; smaller than global/ranks means gradient
    accumulation. 0: global_batch_size / ranks (no accumulation)."""
    activation_checkpointing: str = "none"
    """Recompute activations in backward: none | full (every block) | selective (every 2nd)."""
    deterministic: bool = False
    """use_deterministic_algorithms, no cuDNN autotuning (bitwise repeats on one GPU model)."""
    lr: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    precision: str = "fp32"
    """fp32 | bf16 | fp16 (fp16 uses a GradScaler)."""
    fp16_init_scale: float = 65536.0
    """GradScaler initial loss scale (fp16 only)."""
    fp16_growth_interval: int = 2000
    """GradScaler: steps without inf/nan before the scale doubles (fp16 only)."""
    device: str = "auto"
    """auto | cpu | cuda."""
    seed: int = 0
    log_interval: int = 25
    step_delay_seconds: float = 0.0
    """Extra sleep per step to emulate a heavier step (demo pacing)."""


@dataclass
class ParallelismConfig:
    mode: str = "ddp"
    """ddp | fsdp (FSDP2 ``fully_shard``). Ignored with one rank."""
    comm_hook: str = "none"
    """DDP gradient compression: none | fp16 | bf16 | powersgd."""
    powersgd_rank: int = 1
    """PowerSGD matrix approximation rank."""
    powersgd_start_iter: int = 2
    """PowerSGD: plain all-reduce for the first N steps (error feedback warm-up)."""


@dataclass
class CheckpointConfig:
    uri: str = ""
    """Directory, file://, s3://, gs:// or az:// URI. Empty: $SPOTWISE_CHECKPOINT_URI, else
    ./checkpoints."""
    interval_steps: int = 100
    """Save every N steps (0 disables the step trigger)."""
    interval_seconds: float = 0.0
    """Also save when this many seconds passed since the last save (0: the job's
    checkpoint interval, from $SPOTWISE_CHECKPOINT_INTERVAL, else disabled)."""
    interval: str = ""
    """"auto": save as often as the pool deserves: the interval the daemon passes at launch
    and rewrites in the store (checkpoint_interval.json), in place of interval_seconds."""
    keep: int = 3
    """Keep the newest K checkpoints (at least 1)."""
    async_save: bool = False
    """Stage to CPU memory and write in the background; training continues."""
    overlap_staging: bool = True
    """Async only: copy to CPU on a thread during the next forward/backward (the optimizer
    step waits for it), instead of before save() returns."""
    staging_dir: str = ""
    """Local scratch for remote stores (save here, then upload). Empty: a temp dir."""
    progress_interval_seconds: float = 5.0
    """How often progress.json is refreshed between checkpoints."""
    load: bool = True
    """Resume from ``latest`` when present."""
    stage_one_replica: bool = True
    """DDP: only rank 0 stages/writes the replicated model and optimizer (no other host copy)."""


@dataclass
class PreemptionConfig:
    cloud: str = ""
    """aws | gcp | azure | local | none. Empty: $SPOTWISE_CLOUD, else none (SIGTERM only)."""
    poll_interval_seconds: float = 1.0
    aws_endpoint: str = ""
    """Empty: $SPOTWISE_AWS_IMDS_ENDPOINT, else http://169.254.169.254."""
    gcp_endpoint: str = ""
    """Empty: $SPOTWISE_GCP_METADATA_ENDPOINT, else http://metadata.google.internal."""
    azure_endpoint: str = ""
    """Empty: $SPOTWISE_AZURE_METADATA_ENDPOINT, else http://169.254.169.254."""
    notice_file: str = ""
    """Local market notice file. Empty: $SPOTWISE_NOTICE_FILE."""


@dataclass
class DebugConfig:
    """Test hooks. They make failures deterministic without sleeping; all off by default."""

    sigterm_at_step: int = 0
    """After finishing this step, the ranks in ``sigterm_ranks`` send themselves SIGTERM."""
    sigterm_ranks: list[int] = field(default_factory=lambda: [0])
    kill_in_save_at_step: int = 0
    """SIGKILL rank 0 after step-N's data is written but before ``latest`` moves."""
    metrics_file: str = ""
    """Rank 0 appends one JSON line per step: {"step", "loss"}."""
    final_params_file: str = ""
    """Rank 0 saves the full model state_dict here at the end (torch.save)."""


@dataclass
class TrainerConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    preemption: PreemptionConfig = field(default_factory=PreemptionConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)

    def validate(self) -> None:
        """Reject values that would fail later in a less obvious place."""
        t, m, c = self.training, self.model, self.checkpoint
        for dotted, choices in CHOICES.items():
            section, key = dotted.split(".")
            value = getattr(getattr(self, section), key)
            _check(value in choices, f"{dotted} must be {_choices(choices, empty=False)}")
        _check(t.steps >= 1, "training.steps must be >= 1")
        _check(t.global_batch_size >= 1, "training.global_batch_size must be >= 1")
        _check(t.micro_batch_size >= 0, "training.micro_batch_size must be >= 0")
        _check(self.data.num_workers >= 0, "data.num_workers must be >= 0")
        _check(self.parallelism.powersgd_rank >= 1, "parallelism.powersgd_rank must be >= 1")
        _check(
            self.parallelism.powersgd_start_iter >= 2,
            "parallelism.powersgd_start_iter must be >= 2 (error feedback needs two plain steps)",
        )
        for what in ("model", "data"):
            factory = getattr(self, what).factory
            _check(
                factory.count(":") == 1 and all(factory.split(":")),
                f"{what}.factory must look like 'pkg.module:function', got {factory!r}",
            )
        _check(m.d_model % m.n_heads == 0, "model.d_model must be divisible by model.n_heads")
        _check(m.seq_len >= 2 and m.n_layers >= 1, "model.seq_len >= 2 and model.n_layers >= 1")
        _check(0.0 <= m.dropout < 1.0, "model.dropout must be in [0, 1)")
        _check(c.keep >= 1, "checkpoint.keep must be >= 1")
        _check(c.interval_steps >= 0, "checkpoint.interval_steps must be >= 0")


CHOICES: dict[str, tuple[str, ...]] = {
    "checkpoint.interval": ("", "auto"),
    "training.precision": ("fp32", "bf16", "fp16"),
    "training.device": ("auto", "cpu", "cuda"),
    "training.activation_checkpointing": ("none", "full", "selective"),
    "parallelism.mode": ("ddp", "fsdp"),
    "parallelism.comm_hook": ("none", "fp16", "bf16", "powersgd"),
    "preemption.cloud": ("", "aws", "gcp", "azure", "local", "none"),
    "data.token_dtype": ("uint16", "uint32"),
}
"""Settings with a fixed set of values: validated, and listed by ``--help``."""

ALIASES: dict[str, str] = {
    "--precision": "training.precision",
    "--steps": "training.steps",
    "--seed": "training.seed",
    "--device": "training.device",
    "--checkpoint-uri": "checkpoint.uri",
    "--parallelism": "parallelism.mode",
    "--async-save": "checkpoint.async_save",
    "--cloud": "preemption.cloud",
}


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _sections() -> dict[str, type]:
    hints = get_type_hints(TrainerConfig)
    return {f.name: hints[f.name] for f in dataclasses.fields(TrainerConfig)}


def _coerce(value: Any, typ: Any, where: str) -> Any:
    """Convert a TOML value or flag string to the field's declared type."""
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if typ is int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
    if typ is float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if typ is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if typ == dict[str, Any]:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise ConfigError(f"{where}: expected a JSON object, got {value!r}") from None
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {value!r}")
        return value
    if typ == list[int]:
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list of integers, got {value!r}")
        return [_coerce(v, int, where) for v in value]
    raise ConfigError(f"{where}: unsupported type {typ}")


def _set(cfg: TrainerConfig, dotted: str, value: Any, where: str) -> None:
    section, _, key = dotted.partition(".")
    sections = _sections()
    if section not in sections or not key:
        raise ConfigError(f"{where}: unknown setting {dotted!r}")
    sub = getattr(cfg, section)
    hints = get_type_hints(type(sub))
    if key not in hints:
        known = ", ".join(sorted(hints))
        raise ConfigError(f"{where}: unknown setting {dotted!r} (known in [{section}]: {known})")
    setattr(sub, key, _coerce(value, hints[key], where))


def load_toml(cfg: TrainerConfig, path: Path) -> None:
    """Apply a TOML file's ``[section] key = value`` tables onto ``cfg``."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None
    for section, table in data.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: top-level key {section!r} must be a [section] table")
        for key, value in table.items():
            _set(cfg, f"{section}.{key}", value, f"{path}: {section}.{key}")


BUNDLED_CONFIGS = Path(__file__).with_name("configs")
# The job's checkpoint interval in seconds, set by the daemon on every instance: the time
# trigger when the trainer's own config sets none (checkpoint.interval_seconds).
ENV_CHECKPOINT_INTERVAL = contract.ENV_CHECKPOINT_INTERVAL


def apply_scheduler_interval(cfg: TrainerConfig) -> None:
    """checkpoint.interval_seconds from $SPOTWISE_CHECKPOINT_INTERVAL when it is not set."""
    raw = os.environ.get(ENV_CHECKPOINT_INTERVAL, "").strip()
    if not raw or cfg.checkpoint.interval_seconds:
        return
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(f"${ENV_CHECKPOINT_INTERVAL}={raw!r}: expected a number of seconds > 0")
    cfg.checkpoint.interval_seconds = seconds


def resolve_config_path(path: Path) -> Path:
    """A path, or the bare name of a bundled config (``--config tiny`` -> configs/tiny.toml)."""
    if not path.exists() and path.parent == Path(".") and path.suffix in ("", ".toml"):
        bundled = BUNDLED_CONFIGS / f"{path.stem}.toml"
        if bundled.exists():
            return bundled
    return path


@functools.cache
def field_docs() -> dict[str, str]:
    """``section.key`` -> the docstring under the field in this file (for ``--help``)."""
    tree = ast.parse(Path(__file__).read_text())
    classes = {typ.__name__: section for section, typ in _sections().items()}
    docs: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in classes:
            body = node.body
            for a, b in itertools.pairwise(body):
                if (
                    isinstance(a, ast.AnnAssign)
                    and isinstance(a.target, ast.Name)
                    and isinstance(b, ast.Expr)
                    and isinstance(b.value, ast.Constant)
                    and isinstance(b.value.value, str)
                ):
                    text = " ".join(b.value.value.split())
                    docs[f"{classes[node.name]}.{a.target.id}"] = text
    return docs


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return f.default


def build_parser() -> argparse.ArgumentParser:
    """Every setting as ``--section.key``, its help showing choices and default."""
    parser = argparse.ArgumentParser(
        prog="python -m trainer",
        description="spotwise trainer. Precedence: defaults < --config FILE.toml < flags. "
        "`--nproc-per-node N` launches N ranks under torchrun and keeps exit code 75.",
        epilog="Exit codes: 0 done, 75 preempted (resume me), 76 fenced, 2 usage, 1 error. "
        "See trainer/README.md.",
    )
    parser.add_argument("--config", type=Path, help="TOML file, or a bundled config name (tiny)")
    parser.add_argument(
        "--nproc-per-node", metavar="N", help="launch N ranks under torchrun (keeps exit 75)"
    )
    parser.add_argument(
        "--nnodes",
        metavar="N",
        help="a gang of N nodes joined at $SPOTWISE_RDZV_ENDPOINT ($SPOTWISE_NNODES wins)",
    )
    docs = field_docs()
    groups: dict[str, argparse._ArgumentGroup] = {}
    for section, typ in _sections().items():
        group = groups[section] = parser.add_argument_group(f"[{section}]")
        for f in dataclasses.fields(typ):
            dotted = f"{section}.{f.name}"
            choices = CHOICES.get(dotted)
            metavar = _choices(choices) if choices else _metavar(f.type)
            text = docs.get(dotted, "")
            help_text = f"{text} (default: {json.dumps(_default(f))})".strip()
            group.add_argument(f"--{dotted}", dest=f"set:{dotted}", metavar=metavar, help=help_text)
    aliases = parser.add_argument_group("aliases")
    for alias, dotted in ALIASES.items():
        choices = CHOICES.get(dotted)
        metavar = _choices(choices) if choices else "VALUE"
        aliases.add_argument(alias, dest=f"alias:{dotted}", metavar=metavar, help=f"= --{dotted}")
    return parser


def _choices(choices: tuple[str, ...], empty: bool = True) -> str:
    return "|".join(c or '""' for c in choices if c or empty)


def _metavar(typ: Any) -> str:
    name = typ if isinstance(typ, str) else getattr(typ, "__name__", str(typ))
    return {"int": "INT", "float": "NUM", "str": "STR", "bool": "true|false"}.get(
        name, "JSON" if "dict" in name else "INT,INT" if "list" in name else "VALUE"
    )


def parse_args(argv: list[str] | None = None) -> TrainerConfig:
    """Build the config: defaults, then ``--config FILE``, then ``--section.key VALUE`` flags."""
    ns = build_parser().parse_args(argv)
    cfg = TrainerConfig()
    if ns.config is not None:
        load_toml(cfg, resolve_config_path(ns.config))
    for dest, value in vars(ns).items():
        if value is None or ":" not in dest:
            continue
        dotted = dest.split(":", 1)[1]
        _set(cfg, dotted, value, f"--{dotted}")
    apply_scheduler_interval(cfg)
    cfg.validate()
    return cfg


def env_or(value: str, env: str, default: str) -> str:
    """Config value if set, else the environment variable, else the default."""
    return value or os.environ.get(env, "") or default
