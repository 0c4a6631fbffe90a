"""The shape of each pre-pass stage's cached value (see :func:`medr2_hooks.cache.conforms`): a stored row of
valid JSON but another shape (an older layout, a foreign writer) is counted as corrupt and recomputed instead
of failing deep inside a later stage."""

from __future__ import annotations

_TEXT = (str, type(None))
_PROB = (float, type(None))

STAGE_SHAPES: dict[str, object] = {
    "classify": {"ebm": str, "qtype": str, "parsed": bool},
    "reformulate": {"query": str, "fallback": bool},
    "reference": {"label": str, "text": str},
    "retrieve": [{"doc_id": str, "text": str, "passage": int, "source_type": str}],
    "own_rank": dict,
    "coarse": float,
    "evidence_level": {"level": int},
    "doc_type": dict,
    "usefulness": {"init": _PROB, "docs": [_PROB]},
    "conflict": [[(int, float)]],
    "cot": {"cot": _TEXT, "answer": (dict, str, type(None)), "tokens": int, "at_limit": bool},
    "demo_cot": {"cot": _TEXT, "answer": (dict, str, type(None)), "tokens": int, "agrees": bool},
    "amt_rewrite": str,
    "amt_expand": str,
    "amt_useful": float,
}
