"""Orphanet names and hierarchy (``rarearena/orphanet_hypernym.json.gz``) and the RareArena grading rule.

A predicted diagnosis is graded on RareArena's 0/1/2 scale, offline:

- **2** — it names the disease: its normalised name equals the case's Orphanet name or the case's own
  diagnosis wording, or it is an Orphanet disorder with the case's Orpha id, or an Orphanet *subtype* of the
  disease (the disease is one of its parents);
- **1** — a close hypernym: a direct Orphanet parent of the disease that groups at most ``CLOSE_PARENT_MAX``
  (20) diseases (a broad parent such as "Rare genetic disease" earns nothing);
- **0** — anything else.

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

CLOSE_PARENT_MAX = 20
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
    parents: tuple[tuple[str, int], ...]  # (normalised parent name, diseases it groups)


class Orphanet:
    def __init__(self, rows: list[dict]):
        self.by_name: dict[str, Disorder] = {}
        self.by_id: dict[str, Disorder] = {}
        for row in rows:
            d = Disorder(str(row["Orphanetid"]), row["name"],
                         tuple((normalise(p["parent"]), int(p.get("parent_disease_count") or 0)) for p in row.get("parents") or []))
            self.by_name.setdefault(normalise(d.name), d)
            self.by_id.setdefault(d.orpha_id, d)

    def grade(self, prediction: str, orpha_name: str, orpha_id: str | None = None, diagnosis: str = "") -> int:
        p, gold = normalise(prediction), normalise(orpha_name)
        if not p:
            return 0
        if p in {gold, normalise(diagnosis)} - {""}:
            return 2
        named = self.by_name.get(p)
        if named is not None and (named.orpha_id == str(orpha_id) or gold in {name for name, _ in named.parents}):
            return 2
        disease = self.by_id.get(str(orpha_id)) or self.by_name.get(gold)
        if disease is not None and any(name == p and count <= CLOSE_PARENT_MAX for name, count in disease.parents):
            return 1
        return 0


@lru_cache(maxsize=2)
def load(path: str | None = None) -> Orphanet:
    file = Path(path) if path else (settings.data_dir() or Path(".")) / TREE
    if not file.is_file():
        raise DataError(f"Orphanet hierarchy not found at {file} (set MEDR2_DATA_DIR; file {TREE})")
    with gzip.open(file, "rt", encoding="utf-8") as fh:
        return Orphanet(json.load(fh))
