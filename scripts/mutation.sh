#!/usr/bin/env bash
# Mutation testing of the modules that hold the maths and the training options (pyproject.toml's
# [tool.mutmut]): mutmut plants one small change at a time (an operator, a constant, an argument)
# and runs the fast tests that reach it; a mutant no test notices is a behaviour nothing pins.
# The whole list is about 8,900 mutants: several hours on 2 cores. Give mutant globs to run a part,
# e.g. `bash scripts/mutation.sh "anyformer.nn.*"`; mutmut runs the cheapest mutants first. Prints
# the score per module (and how many the run did not reach) and keeps mutants/ for `mutmut show`.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pip install --disable-pip-version-check -q mutmut==3.8.1
# The tests run from a copy of the tree in mutants/: point them at the reference data beside the repo.
export ANYFORMER_SHARED_DATA=${ANYFORMER_SHARED_DATA:-$(cd .. && pwd)/shared/data}
export OMP_NUM_THREADS=1  # each mutant runs in a forked child: one thread each, two children at once
rm -rf mutants
.venv/bin/mutmut run --max-children "${MUTMUT_CHILDREN:-2}" "$@" >/dev/null || true
.venv/bin/python scripts/mutation_score.py
