"""The stages the toolbox runs (:class:`~medr2_hooks.pipeline.toolbox.StageToolbox`), declared once with the shape of
their cached values: a pipeline lists the ones it runs (``RETRIEVE``, or ``COARSE_LLM.under(its condition)``) and
declares only the stages of its own."""

from __future__ import annotations

from .declare import Stage

_TEXT = (str, type(None))
_PROB = (float, type(None))
_COT = {"cot": _TEXT, "answer": (dict, str, type(None)), "tokens": int}


def _rerank(c) -> bool:
    return c.rerank


def _cot(c) -> bool:
    return c.cot


CLASSIFY = Stage("classify", "classify", ("classifier",), "question stem", "EBM category, question type",
                 lambda c: c.classify, shape={"ebm": str, "qtype": str, "parsed": bool})
REFORMULATE = Stage("reformulate", "reformulate", ("reformulator",), "question stem, EBM category", "q_EBM",
                    lambda c: c.reformulate, shape={"query": str, "fallback": bool})
REFERENCE = Stage("reference", None, ("reference",), "question, options",
                  "reference answer (f_u's target, Alg. 2's Acc)", lambda c: c.rerank or c.cot,
                  shape={"label": str, "text": str})
RETRIEVE = Stage("retrieve", "retrieve", (), "iteration query", "fused candidates",
                 shape=[{"doc_id": str, "text": str, "passage": int, "source_type": str}])
OWN_RANK = Stage("own_rank", None, (), "question stem, own PubMed id",
                 "rank the excluded own abstract would have had", shape=dict)
COARSE_LLM = Stage("coarse", "rerank", ("relevance",), "rerank query, candidates",
                   "relevance per candidate; top coarse_k", lambda c: c.rerank and c.coarse == "llm", shape=float)
COARSE_CROSS_ENCODER = Stage("coarse", "rerank", (), "rerank query, candidates",
                             "cross-encoder score per candidate; top coarse_k",
                             lambda c: c.rerank and c.coarse == "cross_encoder", shape=float)
EVIDENCE_LEVEL = Stage("evidence_level", "rerank", ("leveler",), "coarse documents", "evidence level (f_h)", _rerank,
                       shape={"level": int})
DOC_TYPE = Stage("doc_type", "rerank", ("doc_typer",), "coarse documents", "document type (f_g)", _rerank,
                 shape=dict)
USEFULNESS = Stage("usefulness", "rerank", ("proxy",), "question, reference answer, coarse documents",
                   "answer loss without and with each document (f_u)", _rerank,
                   shape={"init": _PROB, "docs": [_PROB]})
CONFLICT = Stage("conflict", "rerank", ("conflict",), "pairs of top documents", "conflicting pairs", _rerank,
                 shape=[[(int, float)]])
COT = Stage("cot", "cot", ("cot",), "question, options, selected evidence", "CoT and its answer", _cot,
            shape={**_COT, "at_limit": bool})
STABILITY = Stage("stability", "loop", (), "coarse documents", "centroid shift μ_t", _cot)
DEMO_COT = Stage("demo_cot", "cot", ("cot",), "demonstration, its evidence and gold answer", "rationale", _cot,
                 demos=True, shape={**_COT, "agrees": bool})
PACK = Stage("pack", "apply", (), "evidence, demonstrations, reasoning", "prompt prefix within the window")
