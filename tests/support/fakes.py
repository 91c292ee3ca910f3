"""Test helpers over the shipped in-memory provider (providers.fake.FakeCloud)."""

from __future__ import annotations

from datetime import UTC, datetime

from providers.base import Market, Offering
from providers.fake import FakeCloud, Faults

NOW = datetime(2026, 1, 1, tzinfo=UTC)

__all__ = ["NOW", "FakeCloud", "FakeProvider", "Faults", "offering"]


def offering(
    zone: str = "us-east-1a",
    itype: str = "p3.2xlarge",
    gpu: str = "V100",
    count: int = 1,
    price: float = 1.0,
    market: Market | str = Market.SPOT,
    cloud: str = "aws",
    mem: float = 16,
) -> Offering:
    region = zone[:-1] if cloud == "aws" else zone.rsplit("-", 1)[0]
    return Offering(
        cloud,
        region,
        zone,
        itype,
        gpu,
        count,
        mem,
        8 * count,
        61 * count,
        Market(market),
        price,
        NOW,
    )


class FakeProvider(FakeCloud):
    """The fake as most decision tests want it: answers RUNNING at once, named "fake"."""

    def __init__(self, offerings: list[Offering], **kw: object) -> None:
        kw.setdefault("start_running", True)
        super().__init__(offerings, **kw)  # type: ignore[arg-type]
