"""``Preemptible``: checkpoint-on-notice and exact resume for a training loop you keep.

    from trainer import Preemptible

    with Preemptible(total_steps=1000, save_every=100) as job:
        step = job.load(state)          # 0, or the step of `latest` (state restored in place)
        while step < 1000:
            ...                         # your forward/backward/optimizer step
            step += 1
            job.step(step, state, loss) # progress; save on schedule; on a notice: save, exit 75
        job.done(step, state)           # final save, progress.json "done", DONE, exit code 0

``state`` is a dict: ``model`` and ``optimizer`` (saved through DCP's state-dict helpers, so
DDP and FSDP2 work), any other object with ``state_dict()``/``load_state_dict()`` (an LR
scheduler, a GradScaler) and plain values (ints, floats, tensors), restored in place. The
per-rank RNG (python, numpy, torch, this rank's CUDA device) is saved and restored, so a
loop whose data depends only on the step resumes bit-exactly. It is the same machinery as
``python -m trainer``: the store and atomic ``latest`` (local, s3://, gs:// or az://),
``progress.json`` and ``DONE``, the notice watchers of $SPOTWISE_CLOUD plus SIGTERM, the
owner fence (exit 76) and the notice deadline. On several GPUs, launch the script with
``python -m trainer.launch --nproc-per-node N script.py`` (plain torchrun turns 75 into 1).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from types import TracebackType
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import nn

from trainer import EXIT_FENCED, EXIT_OK, EXIT_PREEMPTED, contract, distributed, rng
from trainer.checkpoint import (
    PLANS,
    RNG_KEY,
    CheckpointManager,
    ModelOptimState,
    final_save_plan,
)
from trainer.config import PreemptionConfig, env_or
from trainer.contract import DONE, ENV_CHECKPOINT_URI
from trainer.fence import Fence, claim_exit
from trainer.interval import IntervalFollower
from trainer.launch import record_exit
from trainer.preemption import SIGTERM, Watcher, make_watcher
from trainer.progress import Progress
from trainer.storage import open_store

log = logging.getLogger("trainer.preemptible")


class _Stateful:
    """Adapts an object with state_dict()/load_state_dict() (LR scheduler, GradScaler) to DCP."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def state_dict(self) -> dict[str, Any]:
        return self.obj.state_dict()

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.obj.load_state_dict(sd)


def _dist_info() -> distributed.DistInfo:
    """Join torchrun's group if the user has not; else describe the group they made."""
    if not dist.is_initialized():
        return distributed.init("auto")
    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    return distributed.DistInfo(rank, world, local, device, owns_group=False)


class Preemptible:
    """Notice watchers, agreed stop, save/load over the checkpoint store, fence, exit codes."""

    def __init__(
        self,
        uri: str | None = None,
        *,
        total_steps: int | None = None,
        save_every: int = 0,
        keep: int = 2,
        async_save: bool = False,
        cloud: str = "",
        notice_file: str = "",
        poll_interval: float = 1.0,
        progress_interval: float = 5.0,
        interval: str = "",
    ) -> None:
        self.uri = env_or(uri or "", ENV_CHECKPOINT_URI, "checkpoints")
        self.total_steps = total_steps
        self.save_every = save_every
        self.keep = keep
        self.async_save = async_save
        self.preemption = PreemptionConfig(
            cloud=cloud, notice_file=notice_file, poll_interval_seconds=poll_interval
        )
        self.progress_interval = progress_interval
        self.last_saved_step: int | None = None
        self._early_saved = False
        if interval not in ("", "auto"):
            raise ValueError(f"interval must be '' or 'auto', got {interval!r}")
        self.interval = interval  # "auto": save by the daemon's interval, not save_every
        self._follower: IntervalFollower | None = None
        self._last_save_at = time.monotonic()

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Preemptible:
        SIGTERM.received = False
        SIGTERM.install()
        self.info = _dist_info()
        self.store = open_store(self.uri)
        self.fence = Fence(self.store)
        self.progress = Progress(
            self.store,
            self.info.rank == 0,
            self.total_steps or 0,
            self.info.world_size,
            self.progress_interval,
            self.fence,
        )
        self.ckpt = CheckpointManager(
            self.store,
            self.info,
            self.keep,
            lambda step: self.progress.update(force=True, last_checkpoint_step=step),
            fence=self.fence,
        )
        self.watcher: Watcher = (
            make_watcher(self.preemption) if self.info.local_rank == 0 else Watcher(1.0)
        )
        self._await_claim()
        if self._agree(self.info.rank == 0 and self.fence.check()):
            self._exit(EXIT_FENCED)
        if contract.ours(self.store.read_text(DONE), self.fence.job_id):
            log.info("%s/DONE exists: nothing to do", self.store.uri)
            self._exit(EXIT_OK)
        if self.interval == "auto" and self.info.rank == 0:
            self._follower = IntervalFollower(self.store, self.fence.job_id)
        self._last_save_at = time.monotonic()
        self.watcher.start()
        return self

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.watcher.stop()
        self.ckpt.close()
        SIGTERM.uninstall()
        if self.info.owns_group:
            distributed.shutdown(self.info)

    def _exit(self, code: int) -> NoReturn:
        record_exit(code)
        raise SystemExit(code)

    def _await_claim(self) -> None:
        """Placed while the previous attempt still saves ($SPOTWISE_CLAIM_WAIT): touch the
        store only once owner.json names this attempt (trainer.fence.claim_exit)."""
        code = claim_exit(self.fence, self.info, stop=lambda: SIGTERM.received)
        if code is not None:
            self._exit(code)

    def _agree(self, flag: bool) -> bool:
        return distributed.sum_across([float(flag)], self.info)[0] > 0

    # ---------------------------------------------------------------------- state
    def _dcp_state(self, state: dict[str, Any], step: int) -> dict[str, Any]:
        out: dict[str, Any] = {f"{RNG_KEY}{self.info.rank}": rng.capture()}
        plain: dict[str, Any] = {"step": step}
        model, optimizer = state.get("model"), state.get("optimizer")
        if isinstance(model, nn.Module) and isinstance(optimizer, torch.optim.Optimizer):
            out["app"] = ModelOptimState(model, optimizer)
        for key, value in state.items():
            if key in ("model", "optimizer") and "app" in out:
                continue
            if hasattr(value, "state_dict") and hasattr(value, "load_state_dict"):
                out[f"obj.{key}"] = _Stateful(value)
            else:
                plain[key] = value
        out["plain"] = plain
        return out

    def load(self, state: dict[str, Any]) -> int:
        """Restore ``state`` in place from ``latest``; return its step (0: fresh start)."""
        latest = self.ckpt.find_latest()
        if latest is None:
            return 0
        world = self.info.world_size
        same_world = [False]

        def build(saved_world: int) -> dict[str, Any]:
            same_world[0] = saved_world == world
            sd = self._dcp_state(state, 0)
            if not same_world[0]:
                sd.pop(f"{RNG_KEY}{self.info.rank}")
            return sd

        loaded = self.ckpt.load(latest, build)
        plain = dict(loaded["plain"])
        step = int(plain.pop("step"))
        state.update(plain)
        if same_world[0]:
            rng.restore(loaded[f"{RNG_KEY}{self.info.rank}"])
        else:
            rng.derive(0, step, self.info.rank)
        self.last_saved_step = step
        log.info("resumed from step-%d", step)
        return step

    def save(self, step: int, state: dict[str, Any]) -> None:
        """Checkpoint ``state`` as step-<step>; ``latest`` moves once it is durable."""
        self.ckpt.save(step, self._dcp_state(state, step), self.async_save)
        self.last_saved_step = step
        self._last_save_at = time.monotonic()
        if self._agree(self.fence.tripped):
            self.ckpt.wait()
            self._exit(EXIT_FENCED)

    # ------------------------------------------------------------------- notices
    def should_stop(self) -> bool:
        """True on every rank once any rank saw a notice or SIGTERM (one small all-reduce)."""
        return self._agree(SIGTERM.received or self.watcher.seen)

    def step(self, step: int, state: dict[str, Any], loss: float | None = None) -> None:
        """Call once per step: progress, a save every ``save_every``, and stop on a notice."""
        early = self.watcher.early is not None and not self._early_saved
        due = self._follower is not None and (
            time.monotonic() - self._last_save_at >= self._follower.current()
        )
        stop, early_any, timer = distributed.sum_across(
            [float(SIGTERM.received or self.watcher.seen), float(early), float(due)], self.info
        )  # one small all-reduce: every rank agrees on all three
        if stop > 0:
            self.stop(step, state, loss)
        if early_any > 0:  # an early signal (AWS rebalance): one extra save, train on
            self._early_saved = True
            if self.watcher.early is not None:
                self.progress.update(force=True, early_signal=self.watcher.early.record())
            self.save(step, state)
        elif timer > 0 or (
            self.interval != "auto" and self.save_every and step % self.save_every == 0
        ):  # "auto": the daemon's interval has passed since the last save
            self.save(step, state)
        self.progress.update(step=step, loss=loss, state="running")

    def stop(self, step: int, state: dict[str, Any], loss: float | None = None) -> NoReturn:
        """Save what fits before the notice's deadline, record progress, exit 75."""
        notice = self.watcher.notice
        if notice is not None:  # the daemon learns it from the store before the final save
            self.progress.update(force=True, state="noticed", notice=notice.record())
        left = notice.seconds_left() if notice is not None else None
        plan, fits = final_save_plan(left, self.ckpt.last_save_seconds, self.ckpt.inflight_left())
        code = float(PLANS.index(plan)) if self.info.rank == 0 else 0.0  # rank 0 decides
        plan = PLANS[int(distributed.sum_across([code], self.info)[0])]
        t0 = time.perf_counter()
        if plan == "abandon":
            self.ckpt.abandon()
        else:
            self.ckpt.wait()
        if plan == "save" and self.last_saved_step != step:
            self.save(step, state)
            self.ckpt.wait()
        self.progress.update(
            force=True,
            step=step,
            loss=loss,
            state="preempted",
            last_checkpoint_step=self.ckpt.last_durable_step,
            last_save_seconds=self.ckpt.last_save_seconds,
            save_fits_notice=fits,
        )
        log.warning(
            "preempted at step %d: step-%s durable after %.2fs; exit %d",
            step,
            self.ckpt.last_durable_step,
            time.perf_counter() - t0,
            EXIT_PREEMPTED,
        )
        self.watcher.acknowledge()
        self._exit(EXIT_PREEMPTED)

    def done(self, step: int, state: dict[str, Any]) -> None:
        """The final checkpoint, progress.json "done" and DONE (rank 0)."""
        if self.last_saved_step != step:
            self.save(step, state)
        self.ckpt.wait()
        self.progress.update(force=True, step=step, last_checkpoint_step=step)
        distributed.barrier(self.info)
        self.progress.done()
        record_exit(EXIT_OK)
        sys.stdout.flush()
