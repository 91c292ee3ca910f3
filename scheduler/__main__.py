"""`python -m scheduler ...` is the `spotwise` command."""

from scheduler.cli import main

main()
