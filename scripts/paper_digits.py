"""Real MNIST test digits drawn as people hand them over: dark ink on light, uneven paper.

Each digit (the first of each class in the MNIST *test* split, never a training one) is upscaled
to a few hundred pixels, drawn in dark ink on a light paper with a lighting gradient and grain,
off-centre on a non-square canvas, and saved the way pictures arrive: PNG, JPEG, a transparent PNG
from a paint program (no paper, coloured ink), a grey photo, and a JPEG whose pixels are stored
sideways with an EXIF orientation tag saying so (as phones do).

    python scripts/paper_digits.py OUTDIR [--data ../shared/data/mnist] [--seed 0]

writes OUTDIR/paper-<index>-<label>.<ext>; tests/data/test_drawn.py uses `render` directly.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image

# The way each of the ten is saved: (how, extension).
STYLES = [("rgb", "png"), ("rgb", "png"), ("rgb", "jpg"), ("grey", "png"), ("alpha", "png"),
          ("rgb", "jpg"), ("alpha-colour", "png"), ("grey", "jpg"), ("exif", "jpg"), ("rgb", "png")]
ORIENTATION = 274  # the EXIF tag; 6 means "rotate 90 degrees clockwise to show it upright"


def first_of_each_class(images: np.ndarray, labels: np.ndarray) -> list[int]:
    """Indices of the first example of each class 0..9, in class order."""
    return [int(np.flatnonzero(labels == k)[0]) for k in range(10)]


def render(digit: np.ndarray, style: str, rng: np.random.Generator) -> Image.Image:
    """One 28x28 uint8 digit (light on black) as a picture of dark ink on paper, in `style`."""
    scale = int(rng.integers(8, 15))
    side = 28 * scale
    d = np.asarray(Image.fromarray(digit).resize((side, side), Image.Resampling.BICUBIC), dtype=np.float32) / 255
    d = np.clip(d, 0, 1)
    h, w = side + int(rng.integers(60, 200)), side + int(rng.integers(150, 300))  # never square
    top, left = int(rng.integers(0, h - side)), int(rng.integers(0, w - side))   # off-centre
    ink_mask = np.zeros((h, w), np.float32)
    ink_mask[top:top + side, left:left + side] = d
    # Blue-black ink; the paint program's layer is drawn in red.
    ink = np.array([0.75, 0.1, 0.1] if style == "alpha-colour" else [0.1, 0.1, 0.14], np.float32)
    if style.startswith("alpha"):
        # A paint program's layer: ink colour where drawn, fully transparent elsewhere (stored black).
        rgb = np.broadcast_to(ink, (h, w, 3)) * (ink_mask[..., None] > 0)
        rgba = np.concatenate([rgb, ink_mask[..., None]], -1)
        return Image.fromarray(np.round(rgba * 255).astype(np.uint8), "RGBA")
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    light = 0.9 + 0.06 * (xx / w - 0.5) - 0.05 * (yy / h - 0.5)           # a lamp off to one side
    paper = np.clip(light + rng.normal(0, 0.015, (h, w)).astype(np.float32), 0, 1)
    paper_rgb = paper[..., None] * np.array([1.0, 0.98, 0.93], np.float32)  # slightly yellow paper
    rgb = paper_rgb * (1 - ink_mask[..., None]) + ink * ink_mask[..., None]
    im = Image.fromarray(np.round(np.clip(rgb, 0, 1) * 255).astype(np.uint8), "RGB")
    if style == "grey":
        return im.convert("L")
    if style == "exif":
        # Stored sideways; the tag tells a viewer to turn it back (Image.Transpose.ROTATE_270 undoes it).
        im = im.transpose(Image.Transpose.ROTATE_90)
        im.info["orientation"] = 6
    return im


def save(im: Image.Image, path: Path) -> None:
    kwargs = {}
    if path.suffix == ".jpg":
        kwargs["quality"] = 85
        if im.info.get("orientation"):
            exif = Image.Exif()
            exif[ORIENTATION] = im.info["orientation"]
            kwargs["exif"] = exif.tobytes()
    im.save(path, **kwargs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mnist")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from anyformer.data import load_image_dataset
    test = load_image_dataset(args.data, "test", cache=False)
    images, labels = test.images[:, 0].numpy(), test.labels.numpy()
    rng = np.random.default_rng(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    for i, (style, ext) in zip(first_of_each_class(images, labels), STYLES):
        path = args.out / f"paper-{i}-{labels[i]}.{ext}"
        save(render(images[i], style, rng), path)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
