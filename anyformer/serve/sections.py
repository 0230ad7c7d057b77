"""Which page and API a run gets, by its model family. A section is one module with FAMILY,
FRAGMENT (its piece of the page in static/), info(ctx), warm_up(ctx) (one request's work, done
before the server starts) and routes(ctx); adding one is that module, its fragment and one line here."""
from __future__ import annotations

from types import ModuleType

from . import classify, generate, sample, series, tables, texts

SECTIONS: dict[str, ModuleType] = {m.FAMILY: m for m in (classify, generate, sample, series, tables, texts)}


def section_for(family: str) -> ModuleType:
    if family not in SECTIONS:
        raise ValueError(f"`anyformer serve` serves {', '.join(sorted(SECTIONS))} runs, not a {family} model")
    return SECTIONS[family]
