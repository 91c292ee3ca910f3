"""Replay: the daemon's deadline policies driven over real spot traces on a simulated clock.

`simulate(trace, job, policy)` replays one job; `datasets` holds the shipped traces;
`scenarios` the settings of `spotwise bench deadline`.
"""

from .sim import Job, Outcome, simulate
from .trace import Convention, Trace

__all__ = ["Convention", "Job", "Outcome", "Trace", "simulate"]
