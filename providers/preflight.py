"""What `spotwise doctor` learns about one cloud account before the first job: each check
that was made with the user's own credentials, whether it passed, and the fix when not.

Every cloud's preflight.py returns a list of `Check`s and never raises for what the account
says (a denial, a missing image, no queue): a check that cannot be made is a problem with
its reason, so one run shows every problem at once. Nothing here launches, and nothing is
left behind but what a check says it writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    OK = "ok"
    PROBLEM = "problem"
    SKIPPED = "skipped"  # could not be checked here, and why is in `detail`


@dataclass(frozen=True, slots=True)
class Check:
    cloud: str
    name: str  # what was checked: "identity", "permission ec2:RunInstances (spot) in us-east-1"
    status: Status
    detail: str  # what was found
    fix: str = ""  # one line: what to change (problems only)

    @property
    def problem(self) -> bool:
        return self.status is Status.PROBLEM

    def as_dict(self) -> dict[str, str]:
        return {
            "cloud": self.cloud,
            "check": self.name,
            "status": self.status.value,
            "detail": self.detail,
            "fix": self.fix,
        }


class Checks:
    """The checks of one cloud, collected in order; `run` turns an unexpected exception of
    one check into a problem naming it, so the next checks still run."""

    def __init__(self, cloud: str) -> None:
        self.cloud = cloud
        self.items: list[Check] = []

    def ok(self, name: str, detail: str) -> None:
        self.items.append(Check(self.cloud, name, Status.OK, detail))

    def problem(self, name: str, detail: str, fix: str) -> None:
        self.items.append(Check(self.cloud, name, Status.PROBLEM, detail, fix))

    def skipped(self, name: str, detail: str) -> None:
        self.items.append(Check(self.cloud, name, Status.SKIPPED, detail))

    def run(self, name: str, fn: Callable[[], Any], fix: str) -> Any:
        """fn() or, when it raises, a problem "<name>: <error>" and None."""
        try:
            return fn()
        except Exception as exc:
            self.problem(name, f"{type(exc).__name__}: {str(exc)[:300]}", fix)
            return None
