"""MIRAGE's item sets (Xiong et al., 2024), read from the same files as the paper's benchmarks: MMLU-Med's 1,089
test items, MedQA-US's 4-option test set (1,273), MedMCQA's dev set (4,183), PubMedQA*'s 500 official test items
(question only) and BioASQ-Y/N (618). MIRAGE is zero-shot: no demonstration is taken out of them.

As MIRAGE asks them, the yes/no sets are lettered multiple choice (``A. yes``, ``B. no``, ``C. maybe``) answered by
letter, and PubMedQA*'s own article is not excluded from retrieval (MedCorp holds PubMed, and MIRAGE searched all of
it): the item's PMID is kept as ``meta["article_pmid"]``, not as the ``pmid`` retrieval excludes. Our own
``pubmedqa`` and ``bioasq_yn`` benchmarks keep the paper's setting (word labels, the own article excluded)."""

from __future__ import annotations

from pathlib import Path

import dataclasses

from . import bioasq, medmcqa, medqa, mmlu, pubmedqa
from .record import Record

LETTERS = "ABC"


def load_mmlu(root: Path) -> list[Record]:
    return mmlu.load(root)


def load_medqa(root: Path) -> list[Record]:
    return medqa.load_usmle(root, options=4, splits=("test",))


def load_medmcqa(root: Path) -> list[Record]:
    return medmcqa.load(root)


def _lettered(record: Record) -> Record:
    """A yes/no(/maybe) item as MIRAGE asks it: its answers as lettered options; the own article not excluded."""
    letters = dict(zip(record.options, LETTERS))
    meta = {("article_pmid" if k == "pmid" else k): v for k, v in record.meta.items()}
    return dataclasses.replace(record, options={letters[k]: v for k, v in record.options.items()},
                               answer=letters[record.answer], meta=meta)


def load_pubmedqa(root: Path) -> list[Record]:
    return [_lettered(r) for r in pubmedqa.load(root) if r.meta.get("official_test")]


def load_bioasq(root: Path) -> list[Record]:
    return [_lettered(r) for r in bioasq.load_yesno(root)]
