"""The newest offerings of every provider, held as columnar numpy arrays.

Placement filters tens of thousands of offerings per decision, so the catalog keeps one array
per field (strings as integer codes) and a per-GPU-model index, and builds Offering objects only
for the rows a decision actually returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from providers.base import Market, Offering


@dataclass(slots=True)
class _Codes:
    """Interns strings to small integers so string filters become integer comparisons."""

    values: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)

    def code(self, value: str) -> int:
        code = self.index.get(value)
        if code is None:
            code = self.index[value] = len(self.values)
            self.values.append(value)
        return code

    def codes_of(self, wanted: Iterable[str]) -> np.ndarray:
        return np.array([self.index[v] for v in wanted if v in self.index], dtype=np.int32)


class Catalog:
    """An immutable snapshot; rebuild it (cheap) when prices change."""

    def __init__(self, offerings: Sequence[Offering]) -> None:
        self._offerings = list(offerings)
        n = len(self._offerings)
        self.clouds, self.regions, self.zones = _Codes(), _Codes(), _Codes()
        self.types, self.gpus, self.pools = _Codes(), _Codes(), _Codes()
        self.cloud = np.empty(n, np.int32)
        self.region = np.empty(n, np.int32)
        self.zone = np.empty(n, np.int32)
        self.instance_type = np.empty(n, np.int32)
        self.gpu_model = np.empty(n, np.int32)
        self.pool = np.empty(n, np.int32)
        self.gpu_count = np.empty(n, np.int32)
        self.gpu_memory_gb = np.empty(n, np.float64)
        self.vcpus = np.empty(n, np.float64)
        self.memory_gb = np.empty(n, np.float64)
        self.spot = np.empty(n, np.bool_)
        self.price = np.empty(n, np.float64)
        for i, o in enumerate(self._offerings):
            self.cloud[i] = self.clouds.code(o.cloud)
            self.region[i] = self.regions.code(o.region)
            self.zone[i] = self.zones.code(o.zone)
            self.instance_type[i] = self.types.code(o.instance_type)
            self.gpu_model[i] = self.gpus.code(o.gpu_model.upper())
            self.pool[i] = self.pools.code(o.pool)
            self.gpu_count[i] = o.gpu_count
            self.gpu_memory_gb[i] = o.gpu_memory_gb
            self.vcpus[i] = o.vcpus
            self.memory_gb[i] = o.memory_gb
            self.spot[i] = o.market is Market.SPOT
            self.price[i] = o.price_per_hour
        # Row indices per GPU model, so a request for "A100" touches only A100 rows.
        order = np.argsort(self.gpu_model, kind="stable")
        bounds = np.searchsorted(self.gpu_model[order], np.arange(len(self.gpus.values) + 1))
        self._by_gpu = {
            model: order[bounds[c] : bounds[c + 1]] for c, model in enumerate(self.gpus.values)
        }
        self._gpu_rows = np.flatnonzero(self.gpu_count > 0)
        # First row of each pool: offering_for_pool is called per attempt in every accrual.
        self._row_of_pool: dict[str, int] = {}
        for i, o in enumerate(self._offerings):
            self._row_of_pool.setdefault(o.pool, i)

    @classmethod
    def empty(cls) -> Catalog:
        return cls([])

    def __len__(self) -> int:
        return len(self._offerings)

    def offering(self, row: int) -> Offering:
        return self._offerings[int(row)]

    def offering_for_pool(self, pool: str) -> Offering | None:
        """The offering of one pool (pools are unique within a snapshot)."""
        row = self._row_of_pool.get(pool)
        return None if row is None else self._offerings[row]

    def __iter__(self):
        return iter(self._offerings)

    def rows_for_models(self, models: Iterable[str] | None) -> np.ndarray:
        """Row indices of offerings with one of these GPU models (None: any GPU)."""
        if models is None:
            return self._gpu_rows
        parts = [self._by_gpu[m.upper()] for m in models if m.upper() in self._by_gpu]
        if not parts:
            return np.empty(0, dtype=np.intp)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def seen_at(self) -> datetime | None:
        return max((o.seen_at for o in self._offerings), default=None)

    def gpu_models(self) -> list[str]:
        return sorted(m for m in self.gpus.values if m)
