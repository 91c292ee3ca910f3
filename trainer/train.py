"""The training loop: resume, train, checkpoint on schedule, stop cleanly on a notice."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from trainer import EXIT_FENCED, EXIT_OK, EXIT_PREEMPTED, distributed, rng
from trainer.amp import Precision
from trainer.checkpoint import RNG_KEY, CheckpointManager, ModelOptimState
from trainer.config import ConfigError, TrainerConfig, env_or
from trainer.contract import DONE, ENV_CHECKPOINT_URI
from trainer.data import TextData
from trainer.fence import Fence
from trainer.model import CharTransformer
from trainer.preemption import SIGTERM, Watcher, make_watcher
from trainer.progress import Progress
from trainer.storage import open_store

log = logging.getLogger("trainer")


def _setup_logging(rank: int) -> None:
    root = logging.getLogger()
    if not any(getattr(h, "_spotwise", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler._spotwise = True  # type: ignore[attr-defined]
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s [rank{rank}] %(levelname)s %(message)s")
        )
        root.addHandler(handler)
    root.setLevel(logging.INFO if rank == 0 else logging.WARNING)


def lr_lambda(warmup: int, total: int):
    """Linear warmup then cosine decay to 10%."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return f


class Trainer:
    """Owns the model, optimizer, data position and checkpoints for one process."""

    def __init__(self, cfg: TrainerConfig) -> None:
        self.cfg = cfg
        t = cfg.training
        self.info = distributed.init(t.device)
        _setup_logging(self.info.rank)
        if t.global_batch_size % self.info.world_size:
            raise ConfigError(
                f"training.global_batch_size={t.global_batch_size} is not divisible by "
                f"the world size {self.info.world_size}"
            )
        uri = env_or(cfg.checkpoint.uri, ENV_CHECKPOINT_URI, "checkpoints")
        try:
            self.store = open_store(uri, cfg.checkpoint.staging_dir)
        except ValueError as e:
            raise ConfigError(f"checkpoint.uri: {e}") from None
        self.fence = Fence(self.store)
        try:
            self.data = TextData(cfg.data, cfg.model.seq_len, t.seed)
        except (OSError, ValueError) as e:
            raise ConfigError(f"data.source: {e}") from None
        torch.manual_seed(t.seed)  # identical initial weights on every rank
        model = CharTransformer(cfg.model, self.data.vocab_size).to(self.info.device)
        self.model = distributed.wrap(model, self.info, cfg.parallelism.mode)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=t.lr, betas=(0.9, 0.95), weight_decay=t.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(t.warmup_steps, t.steps)
        )
        self.precision = Precision(
            t.precision, self.info.device, t.fp16_init_scale, t.fp16_growth_interval
        )
        self.step = 0
        self.samples = 0
        self.last_loss: float | None = None
        self.progress = Progress(
            self.store,
            self.info.rank == 0,
            t.steps,
            self.info.world_size,
            cfg.checkpoint.progress_interval_seconds,
            self.fence,
        )
        self.ckpt = CheckpointManager(
            self.store,
            self.info,
            cfg.checkpoint.keep,
            self.progress.checkpointed,
            cfg.debug.kill_in_save_at_step,
            cfg.checkpoint.overlap_staging,
            self.fence,
        )
        self.sigterm = SIGTERM
        self.watcher: Watcher = (
            make_watcher(cfg.preemption) if self.info.local_rank == 0 else Watcher(1.0)
        )

    # ------------------------------------------------------------------ state
    def _extra(self) -> dict[str, Any]:
        return {
            "train": {
                "step": self.step,
                "samples": self.samples,
                "world_size": self.info.world_size,
            },
            "lr_scheduler": self.scheduler.state_dict(),
            "scaler": self.precision.state_dict(),
        }

    def state(self) -> dict[str, Any]:
        """Everything an exact resume needs; RNG keyed by rank (DCP dedups same-key values)."""
        return {
            "app": ModelOptimState(self.model, self.optimizer),
            "extra": self._extra(),
            f"{RNG_KEY}{self.info.rank}": rng.capture(),
        }

    def resume(self) -> None:
        """Load ``latest`` if any, else seed the per-rank RNG for step 0."""
        seed, rank, world = self.cfg.training.seed, self.info.rank, self.info.world_size
        latest = self.ckpt.find_latest() if self.cfg.checkpoint.load else None
        if latest is None:
            rng.derive(seed, 0, rank)
            return
        same_world = False

        def build(saved_world: int) -> dict[str, Any]:
            nonlocal same_world
            same_world = saved_world == world
            state: dict[str, Any] = {
                "app": ModelOptimState(self.model, self.optimizer),
                "extra": self._extra(),
            }
            if same_world:
                state[f"{RNG_KEY}{rank}"] = rng.capture()
            return state

        state = self.ckpt.load(latest, build)
        extra = state["extra"]
        self.scheduler.load_state_dict(extra["lr_scheduler"])
        self.precision.load_state_dict(extra["scaler"])
        self.step = int(extra["train"]["step"])
        self.samples = int(extra["train"]["samples"])
        if same_world:
            rng.restore(state[f"{RNG_KEY}{rank}"])
        else:
            rng.derive(seed, self.step, rank)
            log.info(
                "world size changed (%s -> %d): RNG re-derived from seed+step",
                extra["train"]["world_size"],
                world,
            )
        log.info("resumed from step-%d (samples=%d)", self.step, self.samples)

    # ------------------------------------------------------------------- loop
    def train_step(self) -> torch.Tensor:
        t, info = self.cfg.training, self.info
        x, y = self.data.batch(self.samples, t.global_batch_size, info.rank, info.world_size)
        x, y = x.to(info.device), y.to(info.device)
        self.model.train()
        with self.precision.autocast():
            loss = self.model(x, y)
        self.precision.backward(loss)
        self.ckpt.wait_staging()  # an async save's CPU copy overlapped forward/backward
        self.precision.step(self.optimizer, list(self.model.parameters()), t.grad_clip)
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.step += 1
        self.samples += t.global_batch_size
        return loss.detach()

    def _fenced(self) -> bool:
        """All ranks agree whether rank 0 saw a newer owner (reads owner.json on rank 0)."""
        mine = self.fence.check() if self.info.rank == 0 else False
        return distributed.sum_across([float(mine)], self.info)[0] > 0

    def run(self) -> int:
        cfg, info = self.cfg, self.info
        if self._fenced():
            return EXIT_FENCED
        if self.store.read_text(DONE) is not None:
            log.info("%s/DONE exists: nothing to do", self.store.uri)
            return EXIT_OK
        self.resume()
        self.sigterm.install()
        self.watcher.start()
        total = cfg.training.steps
        early = self.sigterm.received or self.watcher.seen
        if distributed.sum_across([float(early)], info)[0] > 0:
            # A notice during start-up: nothing ran since `latest` (or nothing at all), so
            # "start me again" loses nothing; skip a save that might not fit the notice.
            self.progress.update(
                force=True,
                step=self.step,
                samples=self.samples,
                state="preempted",
                last_checkpoint_step=self.ckpt.last_durable_step,
            )
            log.warning("notice during start-up at step %d: exit %d", self.step, EXIT_PREEMPTED)
            return EXIT_PREEMPTED
        self.progress.update(
            force=True,
            step=self.step,
            samples=self.samples,
            state="running",
            last_checkpoint_step=self.ckpt.last_durable_step,
        )
        metrics = None
        if cfg.debug.metrics_file and info.rank == 0:
            metrics = open(cfg.debug.metrics_file, "a")  # noqa: SIM115 (closed in finally)
        last_save = time.monotonic()
        t0, steps0 = time.perf_counter(), self.step
        preempted = False
        try:
            while self.step < total:
                loss = self.train_step()
                if self.step == cfg.debug.sigterm_at_step and info.rank in cfg.debug.sigterm_ranks:
                    os.kill(os.getpid(), signal.SIGTERM)  # test hook: a real signal, now
                timer_due = (
                    info.rank == 0
                    and cfg.checkpoint.interval_seconds > 0
                    and time.monotonic() - last_save >= cfg.checkpoint.interval_seconds
                )
                notice = self.sigterm.received or self.watcher.seen
                # One all-reduce per step: every rank agrees on notice, timer and loss.
                fenced = self.fence.tripped  # set on rank 0 by a save's `latest` check
                flags = distributed.sum_across(
                    [float(notice), loss.item(), float(timer_due), float(fenced)], info
                )
                if flags[3] > 0:
                    return self._fenced_exit()
                mean_loss = flags[1] / info.world_size
                self.last_loss = mean_loss
                if metrics is not None:
                    metrics.write(json.dumps({"step": self.step, "loss": mean_loss}) + "\n")
                    metrics.flush()
                if self.step % cfg.training.log_interval == 0 or self.step == total:
                    rate = (self.step - steps0) / max(1e-9, time.perf_counter() - t0)
                    log.info(
                        "step %d/%d loss %.4f (%.1f steps/s)", self.step, total, mean_loss, rate
                    )
                if self.step >= total:
                    break
                if flags[0] > 0:
                    preempted = True
                    break
                every = cfg.checkpoint.interval_steps
                if (every and self.step % every == 0) or flags[2] > 0:
                    self.ckpt.save(self.step, self.state(), cfg.checkpoint.async_save)
                    last_save = time.monotonic()
                self.progress.update(step=self.step, samples=self.samples, loss=mean_loss)
                if cfg.training.step_delay_seconds > 0:
                    time.sleep(cfg.training.step_delay_seconds)
            return self._finish(preempted)
        finally:
            self.watcher.stop()
            if metrics is not None:
                metrics.close()

    def _fenced_exit(self) -> int:
        self.ckpt.wait()
        log.info("stopped at step %d by the owner fence", self.step)
        return EXIT_FENCED

    def _finish(self, preempted: bool) -> int:
        """Final synchronous save (after any in-flight one), progress, DONE or exit 75."""
        t0 = time.perf_counter()
        self.ckpt.wait()
        if self.ckpt.last_saved_step != self.step:
            self.ckpt.save(self.step, self.state(), async_save=False)
        self.ckpt.wait()
        if self._fenced():
            return self._fenced_exit()
        self.progress.update(
            force=True,
            step=self.step,
            samples=self.samples,
            last_checkpoint_step=self.step,
            loss=self.last_loss,
            state="preempted" if preempted else "finishing",
        )
        if preempted:
            log.warning(
                "preempted at step %d: checkpoint durable in %.2fs; exit %d",
                self.step,
                time.perf_counter() - t0,
                EXIT_PREEMPTED,
            )
            self.watcher.acknowledge()
            return EXIT_PREEMPTED
        if self.cfg.debug.final_params_file:
            full = get_model_state_dict(
                self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            )
            if self.info.rank == 0:
                torch.save(full, Path(self.cfg.debug.final_params_file))
        distributed.barrier(self.info)
        self.progress.done()
        log.info("training complete at step %d", self.step)
        return EXIT_OK

    def close(self) -> None:
        self.ckpt.close()
        # Drop DDP/FSDP objects before the group goes: destroying a gloo group under a live
        # DDP module intermittently hangs at exit.
        del self.model, self.optimizer, self.scheduler
        distributed.shutdown(self.info)


def run(cfg: TrainerConfig) -> int:
    trainer = Trainer(cfg)
    try:
        return trainer.run()
    finally:
        trainer.close()
