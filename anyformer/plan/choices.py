"""The decisions a plan makes, their choices, and forcing them by hand.

Each decision names its choices with the stock one (plain PyTorch, the fallback) first. Forcing
is written like `ANYFORMER_PLAN="linear=stock,attention=explicit"`: `stock` alone forces every
decision to its stock choice and measures nothing, `auto` (or an empty value) forces nothing, and
`stock` is also a valid choice for any one decision. Items are read left to right, later ones win,
so `stock,linear=onednn` is "everything stock except the linear layers on oneDNN".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

ENV_PLAN = "ANYFORMER_PLAN"
ALL = "*"  # the key under which a spec's "every decision" choice is kept


@dataclass(frozen=True)
class Decision:
    """One speed choice. `tolerance`: how far a candidate's output may be from stock's, relative to
    the largest |stock output|. `margin`: how much faster a candidate must be to replace stock
    (None: the planner's margin); a choice that changes the numerics (bf16) asks for more."""

    name: str
    choices: tuple[str, ...]
    about: str = ""
    margin: float | None = None
    renamed: tuple[tuple[str, str], ...] = ()  # (old name, choice): old runs' plans and old specs still read

    @property
    def stock(self) -> str:
        return self.choices[0]

    def canonical(self, choice: str) -> str:
        """`choice` under its current name (a renamed choice's old name maps to the new one)."""
        return dict(self.renamed).get(choice, choice)


_REGISTRY: dict[str, Decision] = {}


def register(decision: Decision) -> Decision:
    """Add (or replace) a decision; returns it."""
    if len(decision.choices) < 1 or len(set(decision.choices)) != len(decision.choices):
        raise ValueError(f"a decision needs distinct choices, stock first; got {decision.choices!r}")
    if "auto" in decision.choices or "stock" in decision.choices[1:]:
        raise ValueError(f"'auto' is reserved and 'stock' can only be the first choice; got {decision.choices!r}")
    _REGISTRY[decision.name] = decision
    return decision


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def decision(name: str) -> Decision:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown plan decision {name!r}; expected one of {', '.join(sorted(_REGISTRY))}") from None


def decisions() -> dict[str, Decision]:
    return dict(_REGISTRY)


def _resolve(name: str, choice: str, where: str) -> str | None:
    """The decision's own choice name for `choice` (`stock` becomes its stock); None for `auto`."""
    d = _REGISTRY.get(name)
    if d is None:
        raise ValueError(f"{where}: unknown decision {name!r}; expected one of {', '.join(sorted(_REGISTRY))}")
    if choice == "auto":
        return None
    if choice == "stock":
        return d.stock
    choice = d.canonical(choice)
    if choice not in d.choices:
        raise ValueError(f"{where}: unknown choice {choice!r} for {name}; expected one of "
                         f"{', '.join(('stock', *d.choices[1:], 'auto'))}")
    return choice


def parse(spec: str | Mapping[str, str] | None, where: str = ENV_PLAN) -> dict[str, str | None]:
    """`"stock,linear=onednn"` -> {"*": "stock", "linear": "onednn"}; a value None means "measure".

    A mapping is read like the string's items (keys may include "*" for every decision).
    Raises a one-line ValueError that shows what was expected."""
    if spec is None:
        return {}
    items = list(spec.items()) if isinstance(spec, Mapping) else _split(spec, where)
    out: dict[str, str | None] = {}
    for name, choice in items:
        if not isinstance(choice, str) or not isinstance(name, str):
            raise ValueError(f"{where}: choices are strings; got {name!r}: {choice!r}")
        if name == ALL:
            if choice not in ("stock", "auto"):
                raise ValueError(f"{where}: a bare item may be 'stock' or 'auto', got {choice!r} "
                                 f"(e.g. {ENV_PLAN}=stock or {ENV_PLAN}=\"linear=stock,attention=explicit\")")
            out = {} if choice == "auto" else {ALL: "stock"}  # a bare item resets what came before
            continue
        out[name] = _resolve(name, choice, where)
    return out


def _split(spec: str, where: str) -> list[tuple[str, str]]:
    items = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        if "=" not in item:
            items.append((ALL, item))
            continue
        name, _, choice = item.partition("=")
        name, choice = name.strip(), choice.strip()
        if not name or not choice:
            raise ValueError(f"{where}: expected NAME=CHOICE items separated by commas, got {item!r} "
                             f"in {spec!r} (e.g. \"linear=stock,attention=explicit\")")
        items.append((name, choice))
    return items


def forced_choice(forced: Mapping[str, str | None], name: str) -> str | None:
    """The choice `forced` (from `parse`) imposes on decision `name`, or None to plan it."""
    if name in forced:
        return forced[name]
    return decision(name).stock if forced.get(ALL) == "stock" else None

