"""One canonical GPU naming for the job parser, every catalog and every adapter.

A GPU is (model, memory per GPU): the model is a family name ("A100", "V100", "H100") and
memory variants are not separate models ("A100-80GB" is model A100 with 80 GB). Each cloud
spells them its own way ("Tesla V100-SXM2-32GB", "nvidia-tesla-a100", "NVIDIA A100 80GB",
"A100-80GB"); `canonical()` maps every spelling to the one form, so `A100-80GB:8` finds an
80 GB A100 on every cloud and `V100:8` reaches p3dn's 32 GB V100s.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str  # canonical family name
    memory_gb: tuple[float, ...]  # the memory variants it ships in (GB per GPU)
    aliases: tuple[str, ...] = ()  # other spellings of the family, after normalisation


# The models the shipped catalogs and the three clouds sell. Memory variants in GB per GPU.
MODELS: tuple[GpuModel, ...] = (
    GpuModel("B200", (180.0, 192.0)),
    GpuModel("H200", (141.0,)),
    GpuModel("H100", (80.0, 94.0), ("H100SXM", "H100MEGA", "H100NVL", "H100PCIE")),
    GpuModel("GH200", (96.0,)),
    GpuModel("A100", (40.0, 80.0), ("A100SXM4", "A100PCIE")),
    GpuModel("A10G", (24.0,)),
    GpuModel("A10", (24.0,)),
    GpuModel("L40S", (48.0,)),
    GpuModel("L4", (24.0,)),
    GpuModel("V100", (16.0, 32.0), ("V100SXM2", "V100PCIE")),
    GpuModel("T4", (16.0,)),
    GpuModel("T4G", (16.0,)),
    GpuModel("P100", (16.0,)),
    GpuModel("P4", (8.0,)),
    GpuModel("K80", (12.0,)),
    GpuModel("M60", (8.0,)),
    GpuModel("A6000", (48.0,), ("RTXA6000",)),
    GpuModel("MI300X", (192.0,)),
    GpuModel("MI25", (16.0,)),
    GpuModel("V520", (8.0,), ("PROV520",)),
    GpuModel("A30", (24.0,)),
    GpuModel("A40", (48.0,)),
    GpuModel("L40", (48.0,)),
)
_BY_KEY: dict[str, GpuModel] = {}
for _m in MODELS:
    _BY_KEY[_m.name] = _m
    for _a in _m.aliases:
        _BY_KEY[_a] = _m

# A memory size is a number on its own ("A100 80GB", "A100-80GB"), never the tail of a model
# name ("A10G", "T4G" are models). Bounded repeats: it runs on user input.
_MEM = re.compile(r"(?<![A-Za-z0-9.])(\d{1,4}(?:\.\d{1,2})?)[ ]{0,3}G(?:I?B)?\b", re.IGNORECASE)
_NOISE = re.compile(r"\b(NVIDIA|TESLA|GEFORCE|AMD|RADEON|INSTINCT|GPU|GPUS)\b", re.IGNORECASE)


def _key(text: str) -> str:
    """'nvidia-tesla-v100-sxm2' -> 'V100SXM2' (vendor words, separators and case dropped)."""
    text = _NOISE.sub(" ", text.replace("-", " ").replace("_", " "))
    return re.sub(r"[^A-Z0-9]", "", text.upper())


def canonical(name: str, memory_gb: float | None = None) -> tuple[str, float] | None:
    """(model, memory GB per GPU) for any cloud's spelling of a GPU, or None if unknown.

    Memory comes from the name where it says so ("A100 80GB"), else from `memory_gb` (what
    the cloud reports), else the model's smallest variant.
    """
    mem_in_name = _MEM.search(name)
    bare = _MEM.sub(" ", name) if mem_in_name else name
    model = _BY_KEY.get(_key(bare))
    if model is None:
        return None
    if mem_in_name:
        mem = float(mem_in_name.group(1))
    elif memory_gb:
        mem = float(memory_gb)
    else:
        mem = model.memory_gb[0]
    return model.name, _snap(model, mem)


def parse_name(name: str) -> tuple[str, float | None] | None:
    """What a user asked for: (model, memory GB stated in the name or None), or None if unknown.

    'A100-80GB' -> ('A100', 80.0); 'a100' -> ('A100', None); 'nvidia-tesla-v100' -> ('V100',
    None). Unlike `canonical`, no memory is assumed when the name states none, so 'A100'
    matches every A100 and 'A100-80GB' only the 80 GB ones.
    """
    if len(name) > 100:
        return None
    mem_in_name = _MEM.search(name)
    bare = _MEM.sub(" ", name) if mem_in_name else name
    model = _BY_KEY.get(_key(bare))
    if model is None:
        return None
    return model.name, float(mem_in_name.group(1)) if mem_in_name else None


def split_memory(name: str) -> tuple[str, float | None]:
    """'A100-80GB' -> ('A100', 80.0); 'any-80GB' -> ('any', 80.0); 'A10G' -> ('A10G', None)."""
    m = _MEM.search(name[:100])
    if m is None:
        return name, None
    bare = (name[: m.start()] + name[m.end() :]).strip(" -_")
    return bare, float(m.group(1))


def _snap(model: GpuModel, mem: float) -> float:
    """Clouds report usable memory (22.5 GB, 79.6 GB, 32768 MiB): use the marketed variant."""
    best = min(model.memory_gb, key=lambda v: abs(v - mem))
    return best if abs(best - mem) <= max(2.0, 0.1 * best) else round(mem, 1)


def known_models() -> list[str]:
    return [m.name for m in MODELS]


def suggest(name: str) -> str | None:
    """The closest known model name, for a 'did you mean' hint."""
    key = _key(_MEM.sub(" ", name[:100]))
    hits = difflib.get_close_matches(key, [m.name for m in MODELS], n=1, cutoff=0.5)
    return hits[0] if hits else None


def get_model(name: str) -> GpuModel | None:
    """The registry entry of a canonical model name ('A100'), or None."""
    return _BY_KEY.get(name)


def max_memory_gb() -> float:
    return max(v for m in MODELS for v in m.memory_gb)
