"""sd_notify without a dependency: READY, STATUS, STOPPING and WATCHDOG pings for Type=notify."""

from __future__ import annotations

import os
import socket


def notify(message: str) -> bool:
    """Send one datagram to $NOTIFY_SOCKET; a no-op (False) when not run by systemd."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    if path.startswith("@"):
        path = "\0" + path[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(path)
            sock.sendall(message.encode())
        return True
    except OSError:
        return False


def watchdog_enabled() -> bool:
    return bool(os.environ.get("WATCHDOG_USEC"))


def watchdog_seconds() -> float | None:
    """Half of systemd's WatchdogSec (the interval sd_watchdog_enabled recommends), or None."""
    raw = os.environ.get("WATCHDOG_USEC", "")
    if not raw.isdigit() or int(raw) <= 0:
        return None
    return int(raw) / 1e6 / 2
