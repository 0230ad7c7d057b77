"""The mutation score per module from `mutmut results --all true` (run by scripts/mutation.sh):
killed, survived and untested mutants, and the score, killed / (killed + survived + untested). Mutants
a stopped run did not reach ("not checked") are counted apart, in no score."""
from __future__ import annotations

import collections
import subprocess
import sys


def main() -> int:
    out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], capture_output=True,
                         text=True, check=True).stdout
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in out.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if name:
            module = name.split(".x")[0] if ".xǁ" in name else name.rsplit(".", 1)[0]
            counts[module][status] += 1
    print(f"{'module':<32} {'killed':>6} {'survived':>8} {'no tests':>8} {'not run':>7} {'score':>6}")
    for module, c in sorted(counts.items()):
        total = c["killed"] + c["survived"] + c["no tests"]
        if total + c["not checked"]:
            print(f"{module:<32} {c['killed']:>6} {c['survived']:>8} {c['no tests']:>8} {c['not checked']:>7} "
                  f"{c['killed'] / max(1, total):>6.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
