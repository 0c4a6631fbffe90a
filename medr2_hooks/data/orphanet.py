"""Orphanet names and hierarchy (``rarearena/orphanet_hypernym.json.gz``) and the RareArena grading rule.

RareArena's authors grade with an LLM judge (GPT-4o) that scores each predicted diagnosis against two sets
(their ``eval/eval_updated.py``): the **score-2 set** — the case's own diagnosis wording and its Orphanet name —
earns 2 for the same disease (a strict synonym or clear equivalent); the **score-1 set** — the disease's direct
Orphanet parents that group at most ``CLOSE_PARENT_MAX`` (10) diseases — earns 1; anything else 0.
:meth:`Orphanet.score_sets` builds both sets (the judge's prompt, :mod:`medr2_hooks.lmeval.judge`, shows them).

:meth:`Orphanet.grade` is the offline lower bound of that judge: it gives 2 only to a name that *is* in the
score-2 set (after normalisation), to a tree synonym of one (rows may carry ``synonyms``; RareArena's shipped
tree has none), or to an Orphanet disorder with the case's Orpha id; 1 to a name in the score-1 set; 0 otherwise.
A correct name the tree does not hold ("Pompe disease" for "Glycogen storage disease due to acid maltase
deficiency") scores 0 here and 2 with the judge, which is why the judge is the headline metric when one is
configured.

Names are compared after normalisation: Unicode NFKC, case folding, typographic apostrophes, a possessive
``'s`` dropped (Orphanet writes "Crohn disease"), punctuation to spaces, whitespace collapsed.
"""

from __future__ import annotations

import gzip
import json
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .. import settings
from ..errors import DataError

CLOSE_PARENT_MAX = 10  # RareArena eval_updated.py: parents grouping <= 10 diseases
TREE = "rarearena/orphanet_hypernym.json.gz"


def normalise(name: str) -> str:
    s = unicodedata.normalize("NFKC", name).casefold().replace("’", "'").replace("‘", "'")
    s = re.sub(r"'s\b", "", s)
    s = re.sub(r"[^\w]+", " ", s)
    return " ".join(s.split())


@dataclass(frozen=True)
class Disorder:
    orpha_id: str
    name: str
    parents: tuple[tuple[str, int], ...]  # (parent name as written, diseases it groups)
    synonyms: tuple[str, ...] = ()


class Orphanet:
    def __init__(self, rows: list[dict]):
        self.by_name: dict[str, Disorder] = {}
        self.by_id: dict[str, Disorder] = {}
        for row in rows:
            d = Disorder(str(row["Orphanetid"]), row["name"],
                         tuple((p["parent"], int(p.get("parent_disease_count") or 0)) for p in row.get("parents")
                               or []),
                         tuple(str(x) for x in row.get("synonyms") or ()))
            for name in (d.name, *d.synonyms):
                self.by_name.setdefault(normalise(name), d)
            self.by_id.setdefault(d.orpha_id, d)

    def disease(self, orpha_name: str, orpha_id: str | None = None) -> Disorder | None:
        return self.by_id.get(str(orpha_id)) or self.by_name.get(normalise(orpha_name))

    def score_sets(self, orpha_name: str, orpha_id: str | None = None,
                   diagnosis: str = "") -> tuple[list[str], list[str]]:
        """RareArena's two reference sets for a case: ``(score-2 names, score-1 names)``, as written."""
        two = list(dict.fromkeys(n for n in (diagnosis.strip(), orpha_name.strip()) if n))
        if len({normalise(n) for n in two}) < len(two):
            two = two[:1]
        disease = self.disease(orpha_name, orpha_id)
        one = [] if disease is None else [name for name, count in disease.parents if count <= CLOSE_PARENT_MAX]
        return two, one

    def grade(self, prediction: str, orpha_name: str, orpha_id: str | None = None, diagnosis: str = "") -> int:
        p = normalise(prediction)
        if not p:
            return 0
        two, one = self.score_sets(orpha_name, orpha_id, diagnosis)
        disease = self.disease(orpha_name, orpha_id)
        same = {normalise(n) for n in two} | ({normalise(n) for n in (disease.name, *disease.synonyms)} if disease
                                              else set())
        named = self.by_name.get(p)
        if p in same or (named is not None and disease is not None and named.orpha_id == disease.orpha_id):
            return 2
        return 1 if p in {normalise(n) for n in one} else 0


@lru_cache(maxsize=2)
def load(path: str | None = None) -> Orphanet:
    file = Path(path) if path else (settings.data_dir() or Path(".")) / TREE
    if not file.is_file():
        raise DataError(f"Orphanet hierarchy not found at {file} (set MEDR2_DATA_DIR; file {TREE})")
    with gzip.open(file, "rt", encoding="utf-8") as fh:
        return Orphanet(json.load(fh))
