"""``pkg.module:function`` import paths for the model and data factories (train-spec style)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from trainer.config import ConfigError


def load(path: str, setting: str) -> Callable[..., Any]:
    """Import ``pkg.module:function``; any failure is one ConfigError line naming the setting."""
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"{setting} = {path!r}: cannot import {module_name!r}: {e}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"{setting} = {path!r}: {module_name} has no function {attr!r}")
    return fn
