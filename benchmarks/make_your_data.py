"""Make the three data sets of benchmarks/results/<cpu>/your_data.md from public packages, in the
shapes users bring them (none of them is used anywhere else in the project):

- emoji/: Twitter's emoji images (npm `emoji-datasource-twitter` 16.0.0, CC-BY 4.0), one folder per
  category, base emoji only (no skin-tone variants); sizes and formats mixed on purpose (64 px RGBA
  PNG, 96 px JPEG, 48 px WebP, 128x100 BMP, 72 px grey PNG), no split, stray files and a truncated JPEG;
- sprueche.txt: the German fortunes of Debian's `fortunes-de`, concatenated (2.8 MiB of UTF-8);
- osuleaf.csv: the UCR archive's OSULeaf (from aeon's package files), TRAIN and TEST in one wide CSV
  with a header and a `class` column, no split.

    python benchmarks/make_your_data.py OUT_DIR     # needs npm, apt-get and the series extra (aeon)
"""
from __future__ import annotations

import csv
import json
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def emoji(out: Path, work: Path) -> None:
    from PIL import Image
    subprocess.run(["npm", "pack", "emoji-datasource-twitter@16.0.0"], cwd=work, check=True, capture_output=True)
    with tarfile.open(work / "emoji-datasource-twitter-16.0.0.tgz") as tf:
        tf.extractall(work, filter="data")
    src = work / "package"
    rows = [e for e in json.loads((src / "emoji.json").read_text())
            if e.get("has_img_twitter") and e["category"] != "Component"]
    rng = random.Random(0)
    for e in sorted(rows, key=lambda e: e["image"]):
        im = Image.open(src / "img/twitter/64" / e["image"]).convert("RGBA")
        folder = out / e["category"].replace(" & ", "_and_").replace(" ", "_")
        folder.mkdir(parents=True, exist_ok=True)
        stem = e["image"].rsplit(".", 1)[0]
        flat = Image.alpha_composite(Image.new("RGBA", im.size, (255, 255, 255, 255)), im).convert("RGB")
        kind = rng.randrange(5)
        if kind == 0:
            im.save(folder / f"{stem}.png")
        elif kind == 1:
            flat.resize((96, 96), Image.BICUBIC).save(folder / f"{stem}.jpg", quality=90)
        elif kind == 2:
            flat.resize((48, 48), Image.BICUBIC).save(folder / f"{stem}.webp", quality=85)
        elif kind == 3:
            flat.resize((128, 100), Image.BICUBIC).save(folder / f"{stem}.bmp")
        else:
            flat.convert("L").resize((72, 72), Image.BICUBIC).save(folder / f"{stem}.png")
    (out / "README.txt").write_text("emoji by category, from emoji-datasource-twitter 16.0.0 (CC-BY 4.0)\n")
    (out / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (out / "Flags" / "Thumbs.db").write_bytes(b"\xd0\xcf\x11\xe0")
    (out / "Objects" / "notes.docx").write_bytes(b"PK\x03\x04 not an image")
    good = next((out / "Animals_and_Nature").glob("*.jpg")).read_bytes()
    (out / "Animals_and_Nature" / "broken.jpg").write_bytes(good[: len(good) // 3])


def fortunes(out: Path, work: Path) -> None:
    subprocess.run(["apt-get", "download", "-qq", "fortunes-de"], cwd=work, check=True, capture_output=True)
    deb = next(work.glob("fortunes-de_*.deb"))
    subprocess.run(["dpkg", "-x", str(deb), str(work / "deb")], check=True)
    folder = work / "deb/usr/share/games/fortunes/de"
    parts = [p.read_bytes() for p in sorted(folder.iterdir()) if not p.is_symlink() and p.suffix != ".dat"]
    out.write_bytes(b"".join(parts))


def osuleaf(out: Path) -> None:
    from anyformer.data.series.archive import read_ts
    from anyformer.data.series.dataset import aeon_data_dir
    rows = []
    for split in ("TRAIN", "TEST"):
        raw = read_ts(aeon_data_dir() / "OSULeaf" / f"OSULeaf_{split}.ts")
        rows += [(y, s[0].tolist()) for s, y in zip(raw.series, raw.labels)]
    length = max(len(v) for _, v in rows)
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["class"] + [f"t{i:03d}" for i in range(length)])
        w.writerows([y] + [f"{x:.6g}" for x in v] for y, v in rows)


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "your-data")
    shutil.rmtree(out, ignore_errors=True)
    (out / "series").mkdir(parents=True)
    (out / "text").mkdir()
    with tempfile.TemporaryDirectory() as work:
        emoji(out / "emoji", Path(work))
        fortunes(out / "text" / "sprueche.txt", Path(work))
    osuleaf(out / "series" / "osuleaf.csv")
    print(f"made {out}/emoji, {out}/text/sprueche.txt, {out}/series/osuleaf.csv")


if __name__ == "__main__":
    main()
