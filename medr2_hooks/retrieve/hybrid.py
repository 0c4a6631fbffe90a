"""Merging retrievers (paper: ``D = D_dense ∪ D_sparse``) and reciprocal rank fusion (MedRAG/MIRAGE:
``1 / (rrf_k + rank + 1)`` with 0-based ranks, ``rrf_k = 100``), plus passage → document aggregation
(a document's score is the best of its passages)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

RRF_K = 100
FUSIONS = ("union", "rrf")


@dataclass(frozen=True)
class Fused:
    key: Hashable
    scores: dict[str, float]  # retriever -> its own score (absent: the retriever did not return the unit)
    ranks: dict[str, int]  # retriever -> 0-based rank
    fused: float  # reciprocal-rank-fusion score, also the display order of a union


def rrf_score(rank: int, rrf_k: int = RRF_K) -> float:
    return 1.0 / (rrf_k + rank + 1)


def fuse(ranked: dict[str, Sequence[tuple[Hashable, float]]], mode: str = "union", k: int | None = None,
         rrf_k: int = RRF_K) -> list[Fused]:
    """Merge per-retriever ranked lists of ``(key, score)``.

    ``union``: every key any retriever returned (de-duplicated), both scores kept, ordered by RRF score.
    ``rrf``: the ``k`` keys with the highest RRF score. Ties keep first-seen order.
    """
    if mode not in FUSIONS:
        raise ValueError(f"unknown fusion {mode!r}; valid: {', '.join(FUSIONS)}")
    scores: dict[Hashable, dict[str, float]] = {}
    ranks: dict[Hashable, dict[str, int]] = {}
    fused_score: dict[Hashable, float] = {}
    for name, items in ranked.items():
        for rank, (key, score) in enumerate(items):
            key_ranks = ranks.get(key)
            if key_ranks is None:
                ranks[key], scores[key], fused_score[key] = {name: rank}, {name: float(score)}, rrf_score(rank, rrf_k)
            elif name not in key_ranks:  # a retriever lists each unit once; keep its best rank
                key_ranks[name], scores[key][name] = rank, float(score)
                fused_score[key] += rrf_score(rank, rrf_k)
    order = sorted(ranks, key=fused_score.__getitem__, reverse=True)  # stable: ties keep first-seen order
    fused = [Fused(key, scores[key], ranks[key], fused_score[key]) for key in order]
    return fused if mode == "union" or k is None else fused[:k]


def best_per_document(rows: np.ndarray, scores: np.ndarray, passage_doc: np.ndarray,
                      limit: int) -> list[tuple[int, float, int]]:
    """``(doc_row, best_score, best_passage_row)`` from passages sorted by descending score."""
    seen: dict[int, tuple[int, float, int]] = {}
    for row, score in zip(rows, scores):
        if row < 0:
            continue
        doc = int(passage_doc[row])
        if doc not in seen:
            seen[doc] = (doc, float(score), int(row))
            if len(seen) == limit:
                break
    return list(seen.values())
