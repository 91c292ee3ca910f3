"""DCP checkpoints in ``step-<N>/`` folders with a ``latest`` pointer written last.

Order of a save (sync or async): the owner fence is checked (a store another job or a newer
attempt owns is never written: no step deleted, written or uploaded); DCP writes every
rank's shard and then, on the coordinator, ``.metadata`` (fsynced, renamed); for a remote
store the shards are uploaded, then ``.metadata``; only then does rank 0 replace ``latest``
(a conditional write, ``Fence.advance``) and prune to the newest K. A crash anywhere
before that leaves ``latest`` on the previous checkpoint, so a half-written one is never
loaded. Async saves stage the state to CPU memory (pinned only with an accelerator) and
write on a background thread over a dedicated gloo group, so they never interleave with
the training collectives.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful

from trainer.contract import LATEST
from trainer.distributed import DistInfo
from trainer.fence import Fence
from trainer.storage import METADATA, Store

log = logging.getLogger("trainer.checkpoint")

# One plain process saving is intended, not a misconfiguration.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable")

RNG_KEY = "rng_rank"
"""Per-rank RNG lives under rng_rank<i>: DCP deduplicates plain values saved under one key."""


class ModelOptimState(Stateful):
    """Model + optimizer through DCP's state_dict helpers (handles DDP and FSDP2 alike)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model = model
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {"model": model_sd, "optim": optim_sd}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optim"],
            options=StateDictOptions(strict=True),
        )


class EventStager(DefaultStager):
    """Async staging that waits for the compute stream explicitly, on a CUDA event.

    The event is recorded on the training thread when the save starts (after the optimizer
    step was enqueued); the staging thread waits for it before copying, so the copy never
    races the step's kernels and the training thread never blocks on the device for it.
    """

    def stage(self, state_dict: Any, **kwargs: Any) -> Any:
        event = torch.cuda.Event()
        event.record()
        self._compute_done = event
        return super().stage(state_dict, **kwargs)

    def _stage(self, state_dict: Any, **kwargs: Any) -> Any:
        event = getattr(self, "_compute_done", None)
        if event is not None:
            event.synchronize()  # on the staging thread: the compute stream reached the save
        return super()._stage(state_dict, **kwargs)


def make_stager(overlap: bool) -> DefaultStager:
    """Pinned memory and an event-synchronized copy with CUDA; plain copies on CPU."""
    accel = torch.cuda.is_available()
    options = StagingOptions(
        use_pinned_memory=accel,
        use_shared_memory=False,
        use_async_staging=overlap,
        use_non_blocking_copy=accel,
    )
    return EventStager(options) if accel else DefaultStager(options)


PLANS = ("save", "wait-only", "abandon")


def final_save_plan(
    seconds_left: float | None, save_seconds: float | None, inflight_left: float | None
) -> tuple[str, bool]:
    """What to do on a notice: ("save" | "wait-only" | "abandon", fits the deadline?).

    ``save``: wait for any in-flight save, then save the current step. ``wait-only``: the
    in-flight save fits but a fresh one after it would not: keep that (older) step.
    ``abandon``: not even the in-flight save can finish in time: exit on the last durable
    checkpoint at once rather than die mid-write. Unknown deadline or history: ``save``.
    """
    if seconds_left is None or save_seconds is None:
        return "save", True
    if inflight_left is None:
        return "save", save_seconds <= seconds_left
    if inflight_left + save_seconds <= seconds_left:
        return "save", True
    if inflight_left <= seconds_left:
        return "wait-only", False
    return "abandon", False


def parse_latest(text: str | None) -> int | None:
    """``latest`` holds one line ``step-<N>``."""
    if not text:
        return None
    name = text.strip()
    if name.startswith("step-") and name[5:].isdigit():
        return int(name[5:])
    return None


class CheckpointManager:
    """Save/load/prune for one run; every public method is called by all ranks together."""

    def __init__(
        self,
        store: Store,
        info: DistInfo,
        keep: int,
        on_durable: Callable[[int], None] | None = None,
        kill_in_save_at_step: int = 0,
        overlap_staging: bool = True,
        fence: Fence | None = None,
    ) -> None:
        self.store = store
        self.fence = fence
        self.info = info
        self.keep = keep
        self.on_durable = on_durable
        self.kill_in_save_at_step = kill_in_save_at_step
        self.overlap_staging = overlap_staging
        self._staging: Future | None = None
        self.last_saved_step: int | None = None
        """Step of the last save started (identical on all ranks)."""
        self.last_durable_step: int | None = None
        self._pending: threading.Thread | None = None
        self._error: BaseException | None = None
        self._stager: DefaultStager | None = None
        self._group: dist.ProcessGroup | None = None
        self._started = 0.0
        self.last_save_seconds: float | None = None
        """Start of the last completed save until durable (``latest`` moved)."""
        self.saved_keys: set[str] = set()
        """Top-level keys of the checkpoint being loaded (set before ``build_state``)."""
        self._abandoned = False
        if info.enabled:
            # Background saves run collectives; a separate gloo group keeps them from
            # interleaving with the training group's (possibly NCCL) collectives.
            self._group = dist.new_group(backend="gloo")

    # ------------------------------------------------------------------ discovery
    def find_latest(self) -> int | None:
        """Step to resume from, decided by rank 0 and broadcast so all ranks agree."""
        choice: list[int | None] = [None]
        if self.info.rank == 0:
            choice[0] = self._find_latest_local()
        if self.info.enabled:
            dist.broadcast_object_list(choice, src=0, group=self._group)
        return choice[0]

    def _find_latest_local(self) -> int | None:
        step = parse_latest(self.store.read_text(LATEST))
        if step is None:
            return None
        dirs = self.store.step_dirs()
        if dirs.get(step):
            return step
        # `latest` is written after its checkpoint, so this means someone deleted files.
        complete = [s for s, ok in dirs.items() if ok and s <= step]
        log.warning("latest -> step-%d is missing or incomplete; using %s", step, complete)
        return max(complete) if complete else None

    # ------------------------------------------------------------------------ save
    def save(self, step: int, state: dict[str, Any], async_save: bool = False) -> None:
        """Checkpoint ``state`` as ``step-<step>``; async returns after staging to CPU.
        Nothing is written when the fence has tripped (``fence.tripped`` then says so)."""
        self.wait()
        self._started = time.perf_counter()
        if not self._prepare(step):
            return
        self.last_saved_step = step
        ckpt_dir = str(self.store.local_dir(step))
        if not async_save:
            dcp.save(state, checkpoint_id=ckpt_dir, process_group=self._group)
            self._finalize(step)
            return
        if self._stager is None:
            self._stager = make_stager(self.overlap_staging)
        fut = dcp.async_save(
            state, checkpoint_id=ckpt_dir, process_group=self._group, async_stager=self._stager
        )
        if isinstance(fut, Future):
            upload_future = fut
        else:  # staging runs on a thread; training must call wait_staging() before it mutates
            upload_future, self._staging = fut.upload_completion, fut.staging_completion
        self._pending = threading.Thread(
            target=self._background, args=(step, upload_future), name=f"ckpt-{step}", daemon=True
        )
        self._pending.start()

    def _background(self, step: int, fut: Future) -> None:
        try:
            fut.result()
            self._finalize(step)
        except BaseException as e:  # surfaced to the training thread by wait()
            self._error = e

    def wait_staging(self) -> None:
        """Block until the in-flight async save has copied the state (call before mutating it)."""
        if self._staging is not None:
            self._staging.result()
            self._staging = None

    def wait(self) -> None:
        """Block until an in-flight async save is durable; re-raise its error."""
        self._staging = None
        if self._pending is not None:
            self._pending.join()
            self._pending = None
        if self._error is not None:
            err, self._error = self._error, None
            raise RuntimeError(f"background checkpoint failed: {err}") from err

    @property
    def in_flight(self) -> bool:
        return self._pending is not None and self._pending.is_alive()

    def inflight_left(self) -> float | None:
        """Estimated seconds until the in-flight save is durable (None: none in flight)."""
        if not self.in_flight:
            return None
        typical = self.last_save_seconds or 0.0
        return max(0.0, self._started + typical - time.perf_counter())

    def abandon(self) -> None:
        """Leave an in-flight save behind (its `latest` move may never happen) and exit."""
        self._pending = None
        self._staging = None
        self._abandoned = True

    def _owned(self) -> bool:
        """Rank 0 checks the fence; every rank learns the answer (False: fenced)."""
        fenced = [self.info.rank == 0 and self.fence is not None and self.fence.check()]
        if self.info.enabled:
            dist.broadcast_object_list(fenced, src=0, group=self._group)
        if fenced[0] and self.fence is not None:
            self.fence.tripped = True  # every rank: the training loop stops on it
        return not fenced[0]

    def _prepare(self, step: int) -> bool:
        """Check the fence, then remove a stale (crashed) copy of this step so DCP never
        mixes old and new files. False, with nothing deleted, when fenced: a stale attempt
        that is behind must never delete the owner's newest step."""
        if not self._owned():
            log.error("not saving step-%d: another owner holds the store", step)
            return False
        if self.info.rank == 0:
            self.store.delete_step(step)
        if not self.store.is_local and self.info.local_rank == 0:
            shutil.rmtree(self.store.local_dir(step), ignore_errors=True)
        if self.info.enabled:
            dist.barrier(group=self._group)
        if self.info.local_rank == 0:
            self.store.local_dir(step).mkdir(parents=True, exist_ok=True)
        if self.info.enabled:
            dist.barrier(group=self._group)
        return True

    def _finalize(self, step: int) -> None:
        """Make the step durable in the store, then move ``latest`` (rank 0), then prune."""
        if not self.store.is_local:
            local = self.store.local_dir(step)
            if self.info.local_rank == 0 and not (self.fence and self.fence.check()):
                shards = [p for p in sorted(local.iterdir()) if p.name != METADATA]
                self.store.upload(step, shards)
            if self.info.enabled:
                dist.barrier(group=self._group)
            if self.info.rank == 0 and not (self.fence and self.fence.check()):
                self.store.upload(step, [local / METADATA])
        if self.info.rank == 0 and self.fence is not None and self.fence.check():
            return  # another owner holds the store: never move its `latest`
        # Measured before `latest` moves: whoever sees the new `latest` also sees its duration.
        self.last_save_seconds = time.perf_counter() - self._started
        if self.info.rank == 0:
            if self.kill_in_save_at_step == step:
                log.warning("debug: SIGKILL after writing step-%d, before `latest`", step)
                os.kill(os.getpid(), signal.SIGKILL)
            text = f"step-{step}\n"
            if self.fence is None:
                self.store.write_text(LATEST, text)
            elif not self.fence.advance(text):
                return  # the owner moved between the check and the write: it keeps `latest`
            self._prune(step)
        self.last_durable_step = step
        if not self.store.is_local and self.info.local_rank == 0:
            # Staging is scratch: the store holds the durable copy.
            shutil.rmtree(self.store.local_dir(step), ignore_errors=True)
        if self.on_durable is not None:
            self.on_durable(step)

    def _prune(self, newest: int) -> None:
        steps = sorted(self.store.step_dirs())
        keep = set(s for s in steps if s <= newest)
        keep = set(sorted(keep)[-self.keep :]) | {s for s in steps if s > newest}
        for s in steps:
            if s not in keep:
                self.store.delete_step(s)

    # ------------------------------------------------------------------------ load
    def load(self, step: int, build_state: Callable[[int], dict[str, Any]]) -> dict[str, Any]:
        """Load ``step-<step>`` in place into ``build_state(saved_world_size)``; return it.

        The saved world size is read from the checkpoint's own index (one ``rng_rank<i>`` key
        per rank), so the caller can decide what per-rank state to ask for. DCP reshards the
        model and optimizer to the current world size.
        """
        t0 = time.perf_counter()
        if self.info.local_rank == 0:
            local = self.store.download(step)
        else:
            local = self.store.local_dir(step)
        if self.info.enabled:
            dist.barrier(group=self._group)
        meta = dcp.FileSystemReader(str(local)).read_metadata()
        self.saved_keys = {k.split(".")[0] for k in meta.state_dict_metadata}
        saved_world = len(
            {k.split(".")[0] for k in meta.state_dict_metadata if k.startswith(RNG_KEY)}
        )
        state = build_state(saved_world)
        dcp.load(state, checkpoint_id=str(local), process_group=self._group)
        if self.info.enabled:
            dist.barrier(group=self._group)
        if not self.store.is_local and self.info.local_rank == 0:
            shutil.rmtree(local, ignore_errors=True)
        self.last_saved_step = self.last_durable_step = step
        log.info("loaded step-%d in %.2fs", step, time.perf_counter() - t0)
        return state

    def close(self) -> None:
        if self._abandoned:  # a background save still runs: do not tear its group down
            return
        self.wait()
        if self._stager is not None:
            self._stager.close()
            self._stager = None
        if self._group is not None and dist.is_initialized():
            dist.destroy_process_group(self._group)
            self._group = None
