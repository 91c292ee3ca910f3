"""Your own PyTorch loop, preemptible: ``python -m trainer.examples.own_loop [--steps N]``.

The store, cloud and notice file come from $SPOTWISE_CHECKPOINT_URI, $SPOTWISE_CLOUD and
$SPOTWISE_NOTICE_FILE, as the scheduler sets them. Exit 75 on a notice; run it again to resume.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from trainer import Preemptible


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m trainer.examples.own_loop")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--save-every", type=int, default=50)
    ap.add_argument("--step-delay", type=float, default=0.0, help="seconds of sleep per step")
    ap.add_argument("--losses", default="", help="append {step, loss} JSON lines here")
    args = ap.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.9)
    state = {"model": model, "optimizer": optimizer, "lr_scheduler": sched}

    with Preemptible(total_steps=args.steps, save_every=args.save_every) as job:
        step = job.load(state)  # 0, or where the last run stopped (state restored in place)
        while step < args.steps:
            g = torch.Generator().manual_seed(step)  # the data is a function of the step
            x = torch.randn(64, 8, generator=g)
            loss = F.mse_loss(model(x), x.sum(dim=1, keepdim=True))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            sched.step()
            step += 1
            if args.losses:
                with open(args.losses, "a") as f:
                    f.write(json.dumps({"step": step, "loss": loss.item()}) + "\n")
            job.step(step, state, loss.item())  # saves on schedule; on a notice: save, exit 75
            if args.step_delay:
                time.sleep(args.step_delay)
        job.done(step, state)


if __name__ == "__main__":
    main()
