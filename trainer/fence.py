"""The owner fence: an attempt that lost the store to a newer one must stop writing to it.

The daemon records the attempt it launches in ``owner.json`` (``trainer.contract``). Two live
attempts of one job (a "dead" instance that was only partitioned, say) would otherwise race
on ``latest``. The trainer checks at start and before every ``latest`` write; once tripped
it never writes ``latest``, ``progress.json`` or ``DONE`` again and exits ``EXIT_FENCED``.
"""

from __future__ import annotations

import logging

from trainer import contract
from trainer.storage import Store

log = logging.getLogger("trainer.fence")


class Fence:
    """Reads ``owner.json`` on demand; ``tripped`` sticks once a newer owner was seen."""

    def __init__(self, store: Store, attempt: int | None = None) -> None:
        self.store = store
        self.attempt = contract.my_attempt() if attempt is None else attempt
        self.owner: int | None = None
        self.tripped = False

    def check(self) -> bool:
        """True when a newer attempt owns the store (one read of owner.json, then sticky)."""
        if self.tripped or self.attempt is None:
            return self.tripped
        text = self.store.read_text(contract.OWNER)
        if contract.fenced(text, self.attempt):
            self.tripped, self.owner = True, contract.owner_attempt(text)
            log.error(self.message())
        return self.tripped

    def message(self) -> str:
        return (
            f"fenced: {self.store.uri}/{contract.OWNER} names attempt {self.owner}, this is "
            f"attempt {self.attempt}; leaving latest/progress.json/DONE alone, "
            f"exit {contract.EXIT_FENCED}"
        )
