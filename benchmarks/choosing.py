"""What the choosing scripts (tables_select.py, images_select.py) share: candidate flags that hold
`{EXPR}` rules of a fold, and the RULE FOR CHOOSING their docstrings write down, applied."""
from __future__ import annotations

import math
import re

RULE = re.compile(r"\{([^{}]+)\}")
RULE_NAMES = {"min": min, "max": max, "round": round, "int": int, "ceil": math.ceil, "sqrt": math.sqrt,
              "log2": math.log2}
EPS = 1e-9  # equal means, as far as the rule is concerned


def resolve_rules(flags: str, facts: dict) -> str:
    """Flags with each {EXPR} replaced by its value, EXPR arithmetic over the fold's `facts` (with min,
    max, round, int, ceil, sqrt, log2); an EXPR that gives a string puts flags in by a condition."""
    names = {**RULE_NAMES, **facts}

    def value(m: re.Match) -> str:
        # The expressions are the script's own command line, not a stranger's: arithmetic, no builtins.
        v = eval(m.group(1), {"__builtins__": {}}, names)
        if isinstance(v, str):  # flags chosen by a condition: {'--augment none' if colour else ''}
            return v
        return str(int(v)) if float(v).is_integer() else f"{v:.6g}"
    return RULE.sub(value, flags)


def ranks(scores: dict[str, float]) -> dict[str, float]:
    """Each candidate's rank on one folder or table: 1 is the highest score, and scores within EPS of each other
    tie and share the average rank (the rule). Means of the same counts can differ in the last bits (1275 of 1290
    as 635 + 640 or 637 + 638 over two folds: 98.83720930232559 and 98.83720930232558), which an exact ranking
    would split."""
    out = {}
    for c, s in scores.items():
        above = sum(1 for o in scores.values() if o > s + EPS)
        level = sum(1 for o in scores.values() if abs(o - s) <= EPS)  # itself included
        out[c] = above + (level + 1) / 2
    return out


def verdict(means: dict, candidates: dict[str, str], complete: list[str], scored: list[str], every: list[str],
            what: str) -> str:
    """The rule applied to per-candidate means ({"score", "rank", "wall"}): the first candidate is the
    default; another replaces it only with a better mean rank and a mean score not lower (an equal rank
    with a shorter wall time counts as better); the best rank, then the shortest time, wins. `what`
    names the data ("tables", "folders"); `every` is the CHOOSE set the rule is for."""
    if not candidates:
        return "No verdict: no candidates were run (--dry-run)."
    if sorted(scored) != sorted(every):
        return f"No verdict: the rule is for all CHOOSE {what} ({', '.join(every)}); this summary covers {len(scored)}."
    if len(complete) < len(every):
        return (f"No verdict yet: {len(every) - len(complete)} CHOOSE {what} lack a score of every candidate on every "
                f"fold ({', '.join(t for t in every if t not in complete)}).")
    default, *others = candidates
    d = means[default]
    better = []
    for c in others:
        m = means[c]
        if m["score"] < d["score"] - EPS:  # means of the same figures in another order may differ in the last bits
            continue
        if m["rank"] < d["rank"] - EPS or (abs(m["rank"] - d["rank"]) <= EPS and m["wall"] < d["wall"]):
            better.append(c)
    if not better:
        return (f"Verdict: `{default}` stays the default; no candidate has a better mean rank (or an equal one and a "
                f"shorter wall time) and a mean score not lower.")
    best = min(better, key=lambda c: (means[c]["rank"], means[c]["wall"]))
    return (f"Verdict: `{best}` (`{candidates[best]}`) replaces `{default}`: mean rank {means[best]['rank']:.2f} against "
            f"{d['rank']:.2f}, mean score {means[best]['score']:.2f} against {d['score']:.2f} points"
            + (f"; also qualifying: {', '.join(c for c in better if c != best)}" if len(better) > 1 else "") + ".")
