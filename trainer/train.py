"""The training loop: resume, train, checkpoint on schedule, stop cleanly on a notice."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from trainer import (
    EXIT_FENCED,
    EXIT_OK,
    EXIT_PREEMPTED,
    contract,
    distributed,
    factories,
    rng,
)
from trainer.amp import Precision, bf16_warning
from trainer.checkpoint import (
    PLANS,
    RNG_KEY,
    CheckpointManager,
    ModelOptimState,
    final_save_plan,
)
from trainer.config import ConfigError, TrainerConfig, env_or
from trainer.contract import DONE, ENV_CHECKPOINT_URI
from trainer.data import make_loader, to_device
from trainer.fence import Fence, claim_exit
from trainer.interval import IntervalFollower
from trainer.parallel import (
    CommHook,
    apply_activation_checkpointing,
    compute_loss,
    register_comm_hook,
)
from trainer.preemption import SIGTERM, Notice, Watcher, make_watcher
from trainer.progress import Progress
from trainer.storage import open_store

log = logging.getLogger("trainer")
COMM_KEY = "comm_rank"
"""Per-rank DDP comm-hook state (PowerSGD error feedback) lives under comm_rank<i>."""


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
        self.info = info = distributed.init(t.device)
        _setup_logging(info.rank)
        if t.deterministic:
            rng.enable_determinism()
        if t.global_batch_size % info.world_size:
            raise ConfigError(
                f"training.global_batch_size={t.global_batch_size} is not divisible by "
                f"the world size {info.world_size}"
            )
        per_rank = t.global_batch_size // info.world_size
        self.micro = t.micro_batch_size or per_rank
        if per_rank % self.micro:
            raise ConfigError(
                f"training.micro_batch_size={self.micro} does not divide the per-rank batch "
                f"{per_rank} (global_batch_size {t.global_batch_size} / {info.world_size} ranks)"
            )
        self.accum = per_rank // self.micro
        uri = env_or(cfg.checkpoint.uri, ENV_CHECKPOINT_URI, "checkpoints")
        try:
            self.store = open_store(uri, cfg.checkpoint.staging_dir)
        except ValueError as e:
            raise ConfigError(f"checkpoint.uri: {e}") from None
        self.fence = Fence(self.store)
        self.dataset = factories.load(cfg.data.factory, "data.factory")(cfg)
        if not (hasattr(self.dataset, "__len__") and hasattr(self.dataset, "__getitem__")):
            raise ConfigError(
                f"data.factory {cfg.data.factory!r} returned {type(self.dataset).__name__}, "
                "not a map-style dataset (__len__ and __getitem__)"
            )
        if len(self.dataset) < 1:
            raise ConfigError(f"data.factory {cfg.data.factory!r} returned an empty dataset")
        torch.manual_seed(t.seed)  # identical initial weights on every rank
        model = factories.load(cfg.model.factory, "model.factory")(cfg, self.dataset)
        if not isinstance(model, nn.Module):
            raise ConfigError(f"model.factory {cfg.model.factory!r} did not return an nn.Module")
        model = model.to(info.device)
        n_ac = apply_activation_checkpointing(model, t.activation_checkpointing)
        if n_ac:
            log.info("activation checkpointing (%s): %d blocks", t.activation_checkpointing, n_ac)
        par = cfg.parallelism
        self.model = distributed.wrap(model, info, par.mode)
        self.comm = CommHook("none")
        if info.enabled and par.mode == "ddp":
            self._settle_buckets()
            self.comm = register_comm_hook(
                self.model, par.comm_hook, par.powersgd_rank, par.powersgd_start_iter, t.seed
            )
        elif par.comm_hook != "none":
            log.warning("parallelism.comm_hook=%s needs DDP with >1 rank: ignored", par.comm_hook)
        warning = bf16_warning(t.precision, info.device)
        if warning:
            log.warning(warning)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=t.lr, betas=(0.9, 0.95), weight_decay=t.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(t.warmup_steps, t.steps)
        )
        self.precision = Precision(
            t.precision, info.device, t.fp16_init_scale, t.fp16_growth_interval
        )
        self.step = 0
        self.samples = 0
        self.last_loss: float | None = None
        self.batches: Iterator | None = None
        # DDP replicates model and optimizer: one host copy (rank 0's) is enough to save.
        self.one_replica = info.enabled and par.mode == "ddp" and cfg.checkpoint.stage_one_replica
        self.progress = Progress(
            self.store,
            info.rank == 0,
            t.steps,
            info.world_size,
            cfg.checkpoint.progress_interval_seconds,
            self.fence,
        )
        self.ckpt = CheckpointManager(
            self.store,
            info,
            cfg.checkpoint.keep,
            self._durable,
            cfg.debug.kill_in_save_at_step,
            cfg.checkpoint.overlap_staging,
            self.fence,
        )
        self.sigterm = SIGTERM
        self.watcher: Watcher = (
            make_watcher(cfg.preemption) if info.local_rank == 0 else Watcher(1.0)
        )

    def _settle_buckets(self) -> None:
        """One throw-away forward/backward (eval mode, RNG restored, grads dropped) so DDP
        re-buckets now, before the first real step and before a comm hook is attached.

        DDP rebuilds its gradient buckets after a process's first iteration. Without this, a
        resumed process would run its first step on the initial layout while the run it
        continues used the rebuilt one: with 3+ ranks the all-reduce then sums each element
        in another order (a resume that is close, not exact: 1x4 ranks resumed at step 15
        differed from the uninterrupted run by 1.6e-5 in the final weights), and PowerSGD's
        per-bucket error feedback would be applied to the wrong elements.
        """
        saved = rng.capture()
        self.model.eval()
        batch = torch.utils.data.default_collate([self.dataset[0]])
        compute_loss(self.model, to_device(batch, self.info.device)).backward()
        self.model.zero_grad(set_to_none=True)
        rng.restore(saved)

    def _durable(self, step: int) -> None:
        self.progress.update(
            force=True, last_checkpoint_step=step, last_save_seconds=self.ckpt.last_save_seconds
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
        """Everything an exact resume needs; per-rank values keyed by rank (DCP dedups them)."""
        rank = self.info.rank
        state: dict[str, Any] = {f"{RNG_KEY}{rank}": rng.capture()}
        if not (self.one_replica and rank != 0):
            state["app"] = ModelOptimState(self.model, self.optimizer)
            state["extra"] = self._extra()
        blob = self.comm.state_bytes()
        if blob is not None:
            state[f"{COMM_KEY}{rank}"] = blob
        return state

    def resume(self) -> None:
        """Load ``latest`` if any, else seed the per-rank RNG for step 0."""
        seed, rank, world = self.cfg.training.seed, self.info.rank, self.info.world_size
        latest = self.ckpt.find_latest() if self.cfg.checkpoint.load else None
        if latest is None:
            rng.derive(seed, 0, rank)
            return
        same_world = False
        comm_key = f"{COMM_KEY}{rank}"

        def build(saved_world: int) -> dict[str, Any]:
            nonlocal same_world
            same_world = saved_world == world
            state: dict[str, Any] = {
                "app": ModelOptimState(self.model, self.optimizer),
                "extra": self._extra(),
            }
            if same_world:
                state[f"{RNG_KEY}{rank}"] = rng.capture()
                if comm_key in self.ckpt.saved_keys and self.comm.name == "powersgd":
                    state[comm_key] = b""
            return state

        state = self.ckpt.load(latest, build)
        extra = state["extra"]
        self.scheduler.load_state_dict(extra["lr_scheduler"])
        self.precision.load_state_dict(extra["scaler"])
        self.step = int(extra["train"]["step"])
        self.samples = int(extra["train"]["samples"])
        self.comm.load_state_bytes(state.get(comm_key))
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
    def _grad_sync(self, last: bool) -> contextlib.AbstractContextManager:
        """Gradient accumulation: reduce gradients only on the last micro-batch."""
        if self.accum == 1 or not self.info.enabled:
            return contextlib.nullcontext()
        setter = getattr(self.model, "set_requires_gradient_sync", None)  # FSDP2
        if setter is not None:
            setter(last)
            return contextlib.nullcontext()
        return contextlib.nullcontext() if last else self.model.no_sync()  # type: ignore[operator]

    def train_step(self) -> torch.Tensor:
        t, info = self.cfg.training, self.info
        assert self.batches is not None
        self.model.train()
        total: torch.Tensor | None = None
        for i in range(self.accum):
            batch = to_device(next(self.batches), info.device)
            with self._grad_sync(i == self.accum - 1):
                with self.precision.autocast():
                    loss = compute_loss(self.model, batch)
                if self.accum > 1:
                    loss = loss / self.accum
                self.precision.backward(loss)
            total = loss.detach() if total is None else total + loss.detach()
        self.ckpt.wait_staging()  # an async save's CPU copy overlapped forward/backward
        self.precision.step(self.optimizer, list(self.model.parameters()), t.grad_clip)
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.step += 1
        self.samples += t.global_batch_size
        assert total is not None
        return total

    def run(self) -> int:
        cfg, info = self.cfg, self.info
        waited = self._await_claim()
        if waited is not None:
            return waited
        if self._fenced():
            return EXIT_FENCED
        if contract.ours(self.store.read_text(DONE), self.fence.job_id):
            log.info("%s/DONE exists: nothing to do", self.store.uri)
            return EXIT_OK
        self.resume()
        loader = make_loader(
            self.dataset, cfg, self.samples, self.micro, info.rank, info.world_size, info.device
        )
        self.batches = iter(loader)
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
        early_saved = False
        follower = (
            IntervalFollower(self.store, self.fence.job_id)
            if cfg.checkpoint.interval == "auto"
            else None
        )
        t0, steps0 = time.perf_counter(), self.step
        preempted = False
        try:
            while self.step < total:
                loss = self.train_step()
                if self.step == cfg.debug.sigterm_at_step and info.rank in cfg.debug.sigterm_ranks:
                    os.kill(os.getpid(), signal.SIGTERM)  # test hook: a real signal, now
                early_due = info.rank == 0 and self.watcher.early is not None and not early_saved
                every_s = (
                    follower.current()
                    if follower is not None and info.rank == 0
                    else cfg.checkpoint.interval_seconds
                )
                timer_due = early_due or (
                    info.rank == 0 and every_s > 0 and time.monotonic() - last_save >= every_s
                )
                notice = self.sigterm.received or self.watcher.seen
                fenced = self.fence.tripped  # set on rank 0 by a save's `latest` check
                # One all-reduce per step: every rank agrees on notice, timer, fence and loss.
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
                    self._record_notice()
                    break
                every = 0 if follower is not None else cfg.checkpoint.interval_steps
                if (every and self.step % every == 0) or flags[2] > 0:
                    if early_due:  # an early signal: one extra save, asynchronous if allowed
                        early_saved = True
                        self.progress.update(force=True, early_signal=self.watcher.early.record())  # type: ignore[union-attr]
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

    def _record_notice(self) -> None:
        """progress.json names the notice the moment the loop sees it, before the final save,
        so the daemon learns it from the store (every cloud, not only AWS's queue)."""
        notice = self.watcher.notice
        if notice is None and self.sigterm.received:
            notice = Notice("sigterm", "SIGTERM", None)
        if notice is not None:
            self.progress.update(force=True, state="noticed", notice=notice.record())

    def _await_claim(self) -> int | None:
        """Placed while the previous attempt still saves ($SPOTWISE_CLAIM_WAIT): touch the
        store only once owner.json names this attempt; every rank agrees. None to go on,
        else the exit code (nothing was written)."""
        return claim_exit(self.fence, self.info, stop=lambda: self.sigterm.received)

    def _fenced(self) -> bool:
        """All ranks agree whether rank 0 saw a newer owner (reads owner.json on rank 0)."""
        mine = self.fence.check() if self.info.rank == 0 else False
        return distributed.sum_across([float(mine)], self.info)[0] > 0

    def _fenced_exit(self) -> int:
        self.ckpt.wait()
        log.info("stopped at step %d by the owner fence", self.step)
        return EXIT_FENCED

    def _notice_plan(self) -> tuple[str, dict[str, Any]]:
        """Rank 0 weighs the notice's deadline against the last save's duration; all agree."""
        plan, fields = "save", {}
        if self.info.rank == 0:
            notice = self.watcher.notice
            left = notice.seconds_left() if notice is not None else None
            save_s, inflight = self.ckpt.last_save_seconds, self.ckpt.inflight_left()
            plan, fits = final_save_plan(left, save_s, inflight)
            fields = {"save_fits_notice": fits,
                      "notice_seconds_left": None if left is None else round(left, 3)}  # fmt: skip
            if not fits:
                log.warning(
                    "notice leaves %.1fs; the last save took %.1fs%s: %s",
                    left or 0.0,
                    save_s or 0.0,
                    "" if inflight is None else f" and one is in flight (~{inflight:.1f}s left)",
                    {
                        "save": "saving anyway, it may not finish",
                        "wait-only": "keeping the in-flight save, skipping a fresh one",
                        "abandon": "not waiting; resuming from the last durable checkpoint",
                    }[plan],
                )
        code = distributed.sum_across([float(PLANS.index(plan))], self.info)[0]
        return PLANS[int(code)], fields

    def _finish(self, preempted: bool) -> int:
        """Final synchronous save (after any in-flight one), progress, DONE or exit 75."""
        t0 = time.perf_counter()
        plan, notice_fields = self._notice_plan() if preempted else ("save", {})
        if plan == "abandon":
            self.ckpt.abandon()
        else:
            self.ckpt.wait()
        if plan == "save" and self.ckpt.last_saved_step != self.step:
            self.ckpt.save(self.step, self.state(), async_save=False)
            self.ckpt.wait()
        if self._fenced():
            return self._fenced_exit()
        self.progress.update(
            force=True,
            step=self.step,
            samples=self.samples,
            last_checkpoint_step=self.ckpt.last_durable_step,
            last_save_seconds=self.ckpt.last_save_seconds,
            loss=self.last_loss,
            state="preempted" if preempted else "finishing",
            **notice_fields,
        )
        if preempted:
            log.warning(
                "preempted at step %d: step-%s durable after %.2fs; exit %d",
                self.step,
                self.ckpt.last_durable_step,
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
        self.batches = None  # stops the DataLoader's worker processes
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
