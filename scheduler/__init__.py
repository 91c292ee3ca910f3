"""spotwise scheduler: decisions and state (config, catalog, placement, budgets, the loop).

`systemctl reload` right after `start` sends SIGHUP within the daemon's first second, while
Python is still importing: the default action would end the process. So for `spotwise
daemon` the handler is installed here, before any import that takes time, and a reload that
arrives before the daemon is ready is remembered (`take_early_reloads`) and run once it is.
"""

import signal as _signal
import sys as _sys
import threading as _threading

_early_reloads: list[int] = []


def _remember(signum: int, frame: object) -> None:
    _early_reloads.append(signum)


def _is_daemon_command(argv: list[str]) -> bool:
    words = [a for a in argv if not a.startswith("-")]
    return bool(words) and words[0] == "daemon"


def hold_reloads() -> None:
    """Remember SIGHUPs until the daemon takes them (main thread only)."""
    if hasattr(_signal, "SIGHUP") and _threading.current_thread() is _threading.main_thread():
        _signal.signal(_signal.SIGHUP, _remember)


def take_early_reloads() -> int:
    """How many SIGHUPs arrived before the daemon installed its own handler (then none)."""
    n = len(_early_reloads)
    _early_reloads.clear()
    return n


if _is_daemon_command(_sys.argv[1:]):
    hold_reloads()
