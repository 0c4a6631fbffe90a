"""LLM-AMT baseline (paper §4.2, C.2), composed from the stages the Med-R² pre-pass already has.

1. **Query augmenter**: the model rewrites the question with precise medical terms, then expands the rewrite
   with a short systematic analysis; the retrieval query is question + rewrite + expansion (an unusable reply is
   replaced by nothing and counted). Options and answers never reach it.
2. **Hybrid retrieval** over the same index as Med-R² (every retriever the index has, union fusion), then the
   hybrid retriever's **rerank** (as in LLM-AMT's paper, before the LLM filters): the coarse reranker Med-R² uses
   (``coarse``: the cross-encoder on GPUs, the LLM judge here), keeping the top ``coarse_k``.
3. **Knowledge self-refiner**: two yes/no filters, relevance (the same cached stage as Med-R²'s LLM coarse
   rerank) then usefulness ("does this document help answer the question?"); a document is kept when the
   probability of "yes" exceeds the threshold. Rule: when the filters reject every document the reader gets
   no knowledge; this is counted (``all_knowledge_filtered``), never silently replaced.
4. **Reader**: a chain of thought from the kept knowledge that fits the window (the CoT stage, shared cache);
   the target model then answers with knowledge + question + reasoning in its prompt. No demonstrations.
"""

from __future__ import annotations

import time

from ..data.record import Demo, Question
from ..llm.backend import Backend
from ..llm.closed_set import label_distribution
from ..reformulate import usable
from ..evidence.stage_runs import StageRuns
from .declare import Stage, always, register
from .packing import finish, select_evidence
from .stages import COARSE_CROSS_ENCODER, COARSE_LLM, COT, OWN_RANK, PACK, RETRIEVE
from .toolbox import GENERATION_VERSION, StageToolbox


def rewrite_prompt(backend: Backend, question: str) -> str:
    user = ("Rewrite the medical question with precise medical terminology, keeping every clinical detail. "
            f"Write it on one line.\n\nQuestion: {question}")
    return backend.chat(user) + "Rewritten question:"


def expand_prompt(backend: Backend, question: str, rewrite: str) -> str:
    user = ("Analyse the medical question systematically: name the key findings, the likely conditions and the "
            f"mechanisms involved. Write one short paragraph.\n\nQuestion: {rewrite or question}")
    return backend.chat(user) + "Analysis:"


def usefulness_prompt(question: str, document: str) -> str:
    return (f"Document: {document}\n\nQuestion: {question}\n"
            "Does the document contain knowledge that helps answer the question (yes or no)? Answer:")


def augment(m: StageToolbox, questions: list[Question]) -> list[dict]:
    """``{"rewrite", "expansion", "query"}`` per question; the query is what the retrievers see."""
    cfg = m.cfg
    config = {"model": m.ids["augmenter"], "max_new_tokens": cfg.augment_max_new_tokens, "version": GENERATION_VERSION}

    def rewrite(qs):
        backend = m.llm("augmenter")
        replies = backend.generate([rewrite_prompt(backend, q) for q in qs], cfg.augment_max_new_tokens,
                                   stop=["\n"], role="augmenter")
        return [r.strip() for r in replies]

    rewrites = m.cached("amt_rewrite", [q.question for q in questions], config, rewrite)
    rewrites = [r if usable(r) else "" for r in rewrites]
    m.counts["augment_rewrite_fallbacks"] += sum(not r for r in rewrites)

    def expand(items):
        backend = m.llm("augmenter")
        replies = backend.generate([expand_prompt(backend, q, r) for q, r in items], cfg.augment_max_new_tokens,
                                   stop=["\n\n", "Question:"], role="augmenter")
        return [r.strip() for r in replies]

    expansions = m.cached("amt_expand", [[q.question, r] for q, r in zip(questions, rewrites)], config, expand)
    expansions = [e if usable(e) else "" for e in expansions]
    m.counts["augment_expansion_fallbacks"] += sum(not e for e in expansions)
    return [{"rewrite": r, "expansion": e, "query": "\n".join(p for p in (q.question, r, e) if p)}
            for q, r, e in zip(questions, rewrites, expansions)]


def usefulness(m: StageToolbox, questions: list[str], candidates: list[list[dict]]) -> list[list[float]]:
    """P("yes") that each document helps answer its question (question text only, never the options)."""
    pairs = [[q, h["text"]] for q, hits in zip(questions, candidates) for h in hits]

    def compute(items):
        backend = m.llm("usefulness")
        prompts = [usefulness_prompt(q, backend.truncate(d, m.cfg.max_doc_tokens)) for q, d in items]
        return [float(p[0]) for p in label_distribution(backend, prompts, ["yes", "no"], role="usefulness")]

    scores = iter(m.cached("amt_useful", pairs, {"model": m.ids["usefulness"], "max_doc_tokens": m.cfg.max_doc_tokens},
                           compute, batch_size=128))
    return [[next(scores) for _ in hits] for hits in candidates]


def refine(m: StageToolbox, questions: list[str], queries: list[str], candidates: list[list[dict]]) -> list[list[dict]]:
    """The self-refiner: relevance filter (an LLM judge, against the query ``rerank_query`` names, as Med-R²'s
    coarse rerank), then usefulness filter on the survivors against the question (retrieval order kept)."""
    cfg = m.cfg
    relevant = [[{**h, "relevance": s} for h, s in zip(hits, scores) if s > cfg.relevance_threshold]
                for hits, scores in zip(candidates, m.relevance(m.rerank_queries(questions, queries), candidates,
                                                                scorer="llm"))]
    kept = [[{**h, "usefulness": s} for h, s in zip(hits, scores) if s > cfg.usefulness_threshold]
            for hits, scores in zip(relevant, usefulness(m, questions, relevant))]
    m.counts["refiner_dropped_irrelevant"] += sum(len(c) - len(r) for c, r in zip(candidates, relevant))
    m.counts["refiner_dropped_useless"] += sum(len(r) - len(k) for r, k in zip(relevant, kept))
    m.counts["all_knowledge_filtered"] += sum(bool(c) and not k for c, k in zip(candidates, kept))
    return kept


STAGES = (
    Stage("amt_rewrite", "augment", ("augmenter",), "question stem", "rewrite in precise medical terms", shape=str),
    Stage("amt_expand", "augment", ("augmenter",), "question stem, rewrite", "expansion; the retrieval query",
          shape=str),
    RETRIEVE, OWN_RANK, COARSE_CROSS_ENCODER, COARSE_LLM,
    # the LLM relevance judge: the hybrid rerank when coarse is llm, and always the relevance filter (same cache)
    COARSE_LLM.under(always, step="refine", writes="P(yes) relevant; the relevance filter"),
    Stage("amt_useful", "refine", ("usefulness",), "question stem, relevant documents", "P(yes) useful; the filter",
          shape=float),
    COT.under(always, reads="question, options, kept knowledge", writes="the reader's CoT"),
    PACK,
)


@register("llm_amt", STAGES, steps=("augment", "refine"))
def prepare(m: StageToolbox, benchmark: str, questions: list[Question], demos: list[Demo],
            scoring: str = "letters", answer: str = "default") -> tuple[list[dict], dict]:
    """Evidence packs for ``questions``: kept knowledge as the prefix and the reader's CoT as ``reasoning``.
    LLM-AMT's reader is zero-shot, so the demonstration pool is not used (and ``scoring`` renders nothing)."""
    if answer != "default":
        raise ValueError(f"LLM-AMT's reader answers in the benchmark's own format, not {answer!r}")
    started = time.perf_counter()
    cfg = m.cfg
    runs = StageRuns(m.searcher.retrievers)
    augmented = augment(m, questions)
    queries = [a["query"] for a in augmented]
    candidates = m.retrieve(queries, [q.exclude_pmid for q in questions])
    reranked = m.coarse(m.rerank_queries([q.question for q in questions], queries), candidates)
    kept = refine(m, [q.question for q in questions], queries, reranked)
    selected = [select_evidence(m, hits) for hits in kept]
    cots = m.cots([[q.question, q.options, [h["text"] for h in sel]] for q, sel in zip(questions, selected)])
    for q, cand, rr, kp, sel in zip(questions, candidates, reranked, kept, selected):
        runs.add_iteration(q.id, 1, cand, rr, kp, sel)  # LLM-AMT's refined knowledge is its "fine" stage
    reasoning = [c["cot"] if cfg.answer_with_cot else None for c in cots]
    provenance = [{"cot": c["cot"], "cot_answer": c["answer"], "augmented_query": aug,
                   "retrieved_ids": [h["doc_id"] for h in cand], "iterations": [], "stopped_at": None}
                  for c, aug, cand in zip(cots, augmented, candidates)]
    packs, record = finish(m, benchmark, questions, selected, reasoning, runs, started, scoring,
                           kept=[1] * len(questions), provenance=provenance,
                           evidence_keys=("relevance", "usefulness"))
    return packs, record
