"""MIRAGE's item sets (Xiong et al., 2024), read from the same files as the paper's benchmarks: MMLU-Med's 1,089
test items, MedQA-US's 4-option test set (1,273), MedMCQA's dev set (4,183), PubMedQA*'s 500 official test items
(question only); BioASQ-Y/N is :func:`medr2_hooks.data.bioasq.load_yesno`. MIRAGE is zero-shot: no demonstration is
taken out of them."""

from __future__ import annotations

from pathlib import Path

from . import medmcqa, medqa, mmlu, pubmedqa
from .record import Record


def load_mmlu(root: Path) -> list[Record]:
    return mmlu.load(root)


def load_medqa(root: Path) -> list[Record]:
    return medqa.load_usmle(root, options=4, splits=("test",))


def load_medmcqa(root: Path) -> list[Record]:
    return medmcqa.load(root)


def load_pubmedqa(root: Path) -> list[Record]:
    return [r for r in pubmedqa.load(root) if r.meta.get("official_test")]
