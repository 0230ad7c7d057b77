"""mutmut's generation step alone: copy the tree to mutants/ with every mutant planted (behind mutmut's
trampolines), without its stats run over the whole suite, and print the names of the mutants that match
the globs given, one a line, for `scripts/mutation_recheck.py`:

    python scripts/mutation_generate.py "anyformer.train.checkpoint.*" > names.txt
    cd mutants && python ../scripts/mutation_recheck.py ../tests/train/test_checkpoint_units.py < ../names.txt

mutmut 3.8.1 (the version scripts/mutation.sh pins); its internals, not a public API, hence the pin."""
from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import sys
from pathlib import Path


def main() -> int:
    globs = sys.argv[1:] or ["*"]
    os.chdir(Path(__file__).resolve().parent.parent)
    import mutmut.__main__ as mm
    from mutmut.__main__ import SourceFileMutationData, walk_mutatable_files

    mm.set_mutant_under_test("mutant_generation")
    Path("mutants").mkdir(exist_ok=True)
    with contextlib.redirect_stdout(sys.stderr):  # mutmut prints each file it mutates: not a name
        mm.copy_src_dir()
        mm.copy_also_copy_files()
        mm.setup_source_paths()
        mm.store_lines_covered_by_tests()
        mm.create_mutants(1)
    stats = Path("mutants/mutmut-stats.json")
    if not stats.exists():  # mutation_recheck.py's sign that it stands in mutants/
        stats.write_text(json.dumps({"tests_by_mangled_function_name": {}, "duration_by_test": {}}))
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for name in sorted(data.exit_code_by_key):
            if any(fnmatch.fnmatch(name, g) for g in globs):
                print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
