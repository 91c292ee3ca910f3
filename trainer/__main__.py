"""``python -m trainer [--config tiny.toml] [--section.key VALUE ...]`` (also under torchrun)."""

from __future__ import annotations

import sys

from trainer import EXIT_USAGE
from trainer.config import ConfigError, parse_args


def main(argv: list[str] | None = None) -> int:
    """Parse, train, return the exit code (0 done, 75 preempted, 2 usage error)."""
    try:
        cfg = parse_args(argv)
        from trainer.train import run  # torch import only once the command line is valid

        return run(cfg)
    except ConfigError as e:
        print(f"trainer: error: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
