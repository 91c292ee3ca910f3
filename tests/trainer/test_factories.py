"""Bring your own model and data: factories, the resumable loader, token files, accumulation."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.support.trainer_runs import losses, run_plan, tiny_args
from trainer import EXIT_USAGE
from trainer.__main__ import main
from trainer.config import ConfigError, TrainerConfig
from trainer.data import GlobalBatchSampler, token_file_dataset, write_token_file
from trainer.factories import load
from trainer.parallel import shard_units

USER = {
    "model__factory": "tests.support.user_factories:build_model",
    "data__factory": "tests.support.user_factories:build_data",
}


def _chain(ckpt: Path, at: int, **kw: object) -> list[list[str]]:
    """A reference run, then the same job SIGTERMed at step ``at`` and resumed."""

    def args(c: Path, **more: object) -> list[str]:
        return tiny_args(c, debug__metrics_file=c.with_suffix(".jsonl"), **kw, **more)

    ref, res = ckpt.with_name(ckpt.name + "-ref"), ckpt
    return [args(ref), args(res, debug__sigterm_at_step=at), args(res)]


def _same_losses(ckpt: Path) -> list[float]:
    ref = losses(ckpt.with_name(ckpt.name + "-ref").with_suffix(".jsonl"))
    assert losses(ckpt.with_suffix(".jsonl")) == ref
    return ref


def test_sampler_stream_is_the_same_for_any_world_size_and_micro_batch() -> None:
    def stream(world: int, micro: int) -> list[int]:
        out: dict[int, list[int]] = {}
        for rank in range(world):
            it = iter(GlobalBatchSampler(10, 3, 8, micro, rank, world, seed=1))
            out[rank] = [i for _ in range(2 * (8 // world) // micro) for i in next(it)]
        # per step: rank 0's slice then rank 1's slice
        per = 8 // world
        return [i for s in range(2) for r in range(world) for i in out[r][s * per : (s + 1) * per]]

    assert stream(1, 8) == stream(2, 4) == stream(2, 2) == stream(1, 1)
    assert len(set(stream(1, 8)[:7])) == 7  # the rest of epoch 0 (10 items) from sample 3


def test_factory_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=r"cannot import 'no_such_pkg\.mod'"):
        load("no_such_pkg.mod:build", "model.factory")
    with pytest.raises(ConfigError, match="has no function 'nope'"):
        load("trainer.model:nope", "model.factory")
    assert main(["--model.factory", "trainer.model"]) == EXIT_USAGE
    assert "model.factory must look like 'pkg.module:function'" in capsys.readouterr().err


def test_token_file_is_memory_mapped(tmp_path: Path) -> None:
    path = tmp_path / "tokens.bin"
    write_token_file(path, np.arange(100) % 50, "uint16")
    ds = token_file_dataset(path, "uint16", seq_len=9, vocab_size=50)
    assert isinstance(ds.tokens, np.memmap) and len(ds) == 11
    x, y = ds[2]
    assert x.dtype == torch.long and x.tolist() == list(range(18, 27)) and y[0] == 19


@pytest.mark.timeout(200)
def test_user_factories_token_file_workers_and_accumulation_resume_exactly(tmp_path: Path):
    """Three jobs in one process, each a reference vs SIGTERM + resume, bit-exact."""
    tokens = tmp_path / "corpus.bin"
    rng = np.random.default_rng(0)
    write_token_file(tokens, rng.integers(0, 60, 20_000), "uint32")
    token_kw = dict(data__source=tokens, data__token_dtype="uint32", data__vocab_size=60)
    user1 = tmp_path / "user1"
    plan = [
        # own model + dict batches + .loss output, 4 micro-batches of 2 per step
        *_chain(tmp_path / "user", 6, training__micro_batch_size=2, model__dropout=0.0, **USER),
        # the same job without accumulation: the same math, up to rounding
        tiny_args(user1, debug__metrics_file=user1.with_suffix(".jsonl"), **USER, model__dropout=0),
        # a memory-mapped token file read by 2 DataLoader workers
        *_chain(tmp_path / "tokens", 5, data__num_workers=2, **token_kw),
    ]
    codes, proc = run_plan(plan, tmp_path)
    assert codes == [0, 75, 0, 0, 0, 75, 0], proc.stderr[-3000:]
    user = _same_losses(tmp_path / "user")
    whole = losses(user1.with_suffix(".jsonl"))
    assert user == pytest.approx(whole, rel=1e-4)  # 4 x 2 accumulated == one batch of 8
    _same_losses(tmp_path / "tokens")
    no_workers = tmp_path / "tokens0"
    codes, proc = run_plan(
        [tiny_args(no_workers, debug__metrics_file=no_workers.with_suffix(".jsonl"), **token_kw)],
        tmp_path,
    )
    assert codes == [0] and losses(no_workers.with_suffix(".jsonl")) == _same_losses(
        tmp_path / "tokens"
    )  # workers change nothing but speed


HF = importlib.util.find_spec("transformers") is not None


@pytest.mark.skipif(not HF, reason="transformers is not installed (the optional `hf` extra)")
@pytest.mark.timeout(300)
def test_hf_causal_lm_from_config_trains_and_resumes_exactly(tmp_path: Path) -> None:
    """A 2-layer Llama (hidden 32) built from a config, random weights, no download."""
    kw = {
        "model__factory": "trainer.examples.hf_causal_lm:build",
        "model__options": '{"model_type": "llama"}',
        "model__n_layers": 2,
        "training__steps": 10,
        "training__lr": 1e-2,
    }
    codes, proc = run_plan(_chain(tmp_path / "hf", 4, **kw), tmp_path, HF_HUB_OFFLINE="1")
    assert codes == [0, 75, 0], proc.stderr[-3000:]
    ref = _same_losses(tmp_path / "hf")
    assert ref[-1] < ref[0]
    from trainer.examples.hf_causal_lm import build

    cfg = TrainerConfig()
    cfg.model.d_model, cfg.model.n_heads, cfg.model.options = 32, 2, {"model_type": "gpt2"}
    model = build(cfg, type("D", (), {"vocab_size": 40})())
    assert [type(b).__name__ for b in shard_units(model)] == ["GPT2Block", "GPT2Block"]
