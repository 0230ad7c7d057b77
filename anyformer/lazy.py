"""Names a package imports on first use (PEP 562), so that importing it costs only what is used."""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_names(package: str, exports: dict[str, str],
               modules: tuple[str, ...] = ()) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`package`'s `__getattr__` and `__dir__`: each name of `exports` (name -> its module, relative to the
    package) imported on first use and kept in the package, each of `modules` reached as an attribute."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(f".{exports[name]}", package), name)
            namespace[name] = value
            return value
        if name in modules:
            return importlib.import_module(f".{name}", package)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports, *modules})

    return __getattr__, __dir__
