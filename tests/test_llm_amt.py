"""LLM-AMT on the real embedded model over the demo index: the refiner keeps exactly what both filters accept,
the augmenter never sees the options, relevance is the stage Med-R²'s coarse rerank caches, and a refiner that
rejects everything leaves the reader without knowledge (counted)."""

from __future__ import annotations

import json

import pytest

from medr2_hooks import data

from pipeline_helpers import TINY, _model_calls, _pipeline

pytestmark = pytest.mark.slow

AMT = {**TINY, "method": "llm_amt", "pipeline": "llm_amt", "retrieve_k": 3, "augment_max_new_tokens": 16}


@pytest.fixture(scope="module")
def usmle():
    return data.pools("medqa_usmle").eval[:2]


def test_refiner_keeps_exactly_the_documents_both_filters_accept(tmp_path, usmle):
    from medr2_hooks.prepass.packs import prepare_records
    from medr2_hooks.pipeline import llm_amt

    log: list = []
    m = _pipeline(tmp_path, log, **AMT)
    packs, record = prepare_records(m, "medqa_usmle", usmle, [])
    assert record["pipeline"] == "llm_amt" and record["demos"] == 0

    questions = [r.question for r in usmle]
    augmented = llm_amt.augment(m, [r.public() for r in usmle])  # cached: the same queries as the run
    queries = [a["query"] for a in augmented]
    candidates = m.retrieve(queries, [None] * len(usmle))
    relevance = m.relevance(queries, candidates)  # judged against the current query, as Med-R²'s coarse rerank
    relevant = [[h for h, s in zip(hits, sc) if s > 0.5] for hits, sc in zip(candidates, relevance)]
    useful = llm_amt.usefulness(m, questions, relevant)
    expected = [[h["doc_id"] + "#" + str(h["passage"]) for h, s in zip(hits, sc) if s > 0.5]
                for hits, sc in zip(relevant, useful)]
    kept = llm_amt.refine(m, questions, queries, candidates)
    assert [[h["doc_id"] + "#" + str(h["passage"]) for h in hits] for hits in kept] == expected
    dropped = sum(len(c) for c in candidates) - sum(len(k) for k in kept)
    counts = record["counts"]
    assert counts.get("refiner_dropped_irrelevant", 0) + counts.get("refiner_dropped_useless", 0) == dropped

    for p, hits in zip(packs, kept):
        assert {e["doc_id"] for e in p["evidence"]} <= {h["doc_id"] for h in hits}
        assert all(e["relevance"] > 0.5 and e["usefulness"] > 0.5 for e in p["evidence"])
        assert p["reasoning"] == p["cot"] and p["n_demos"] == 0
        assert p["augmented_query"]["query"].startswith(usmle[packs.index(p)].question)

    # the augmenter, the retrievers and both filters see the question only: never an option text
    # (the reader answers the question, so its CoT prompt lists the options)
    roles = {kind for kind, _ in log}
    assert {"generate:augmenter", "score_choices:relevance", "score_choices:usefulness", "search"} <= roles
    sent = " ".join(payload for kind, payload in log if kind.split(":")[-1] in ("augmenter", "relevance",
                                                                               "usefulness", "search"))
    for r in usmle:
        assert json.dumps(f"\nA. {r.options['A']}")[1:-1] not in sent


def test_relevance_filter_shares_the_med_r2_coarse_cache(tmp_path, usmle):
    from medr2_hooks.prepass.packs import prepare_records

    from medr2_hooks.pipeline import llm_amt

    amt = _pipeline(tmp_path, [], **AMT)
    prepare_records(amt, "medqa_usmle", usmle, [])
    queries = [a["query"] for a in llm_amt.augment(amt, [r.public() for r in usmle])]
    log: list = []
    m = _pipeline(tmp_path, log, **TINY)
    candidates = m.retrieve(queries, [None] * len(usmle))
    m.relevance(queries, candidates)
    assert m.cache.stats.get("coarse:hit", 0) > 0 and _model_calls(log) == []


def test_llm_amt_reranks_with_the_coarse_reranker_before_its_llm_filters(tmp_path, usmle):
    """Issue 28.7: LLM-AMT's hybrid retriever reranks its union (with the coarse reranker Med-R² uses: the
    cross-encoder on GPUs) before the relevance and usefulness filters, which stay LLM judges."""
    from medr2_hooks.prepass.packs import prepare_records

    m = _pipeline(tmp_path, [], **AMT, coarse="cross_encoder", cross_encoder="/nonexistent/cross-encoder")
    with pytest.raises(OSError, match="nonexistent/cross-encoder"):
        prepare_records(m, "medqa_usmle", usmle, [])  # the rerank asks for the cross-encoder
    log: list = []
    packs, record = prepare_records(_pipeline(tmp_path, log, **{**AMT, "coarse_k": 1}), "medqa_usmle", usmle, [])
    runs = record["stage_runs"]
    assert all(len(runs["fused.t1"][r.id]) > 1 for r in usmle)  # the union of both retrievers
    assert all(len(runs["coarse.t1"][r.id]) == 1 for r in usmle)  # reranked to coarse_k before the filters
    assert all(set(runs["fine.t1"][r.id]) <= set(runs["coarse.t1"][r.id]) for r in usmle)
    assert any(kind == "score_choices:relevance" for kind, _ in log)  # the relevance filter: an LLM judge


def test_rejecting_every_document_leaves_the_reader_without_knowledge(tmp_path, usmle):
    from medr2_hooks.lmeval.retrieval import doc_to_text
    from medr2_hooks.prepass.packs import prepare_records

    packs, record = prepare_records(_pipeline(tmp_path, [], **AMT, relevance_threshold=1.0), "medqa_usmle", usmle, [])
    assert record["counts"]["all_knowledge_filtered"] == len(usmle)
    for r, p in zip(usmle, packs):
        assert p["evidence"] == [] and p["prefix"] == ""
        doc = {**r.to_doc(), "benchmark": "medqa_usmle", "prefix": p["prefix"], "reasoning": p["reasoning"]}
        text = doc_to_text(doc)
        assert text.startswith("Question: ") and f"Reasoning: {p['cot'].strip()}\nAnswer:" in text
    again: list = []
    prepare_records(_pipeline(tmp_path, again, **AMT, relevance_threshold=1.0), "medqa_usmle", usmle, [])
    assert _model_calls(again) == []  # cached
