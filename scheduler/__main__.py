"""`python -m scheduler ...` is the `spotwise` command."""

from scheduler.cli.app import run

run()
