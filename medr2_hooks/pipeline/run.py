"""The Med-R² pipeline (paper Alg. 2 over a whole task, then packing) and its ablations: :func:`prepare` returns
one evidence pack per question and the pre-pass record, with every stage's ranked documents per iteration
(``record["stage_runs"]``: what ``medr2 evidence`` scores against gold evidence)."""

from __future__ import annotations

import time

import numpy as np

from .. import loop
from ..data.record import Demo, Question
from ..reformulate import iteration_query
from .declare import Stage, register
from .evidence import evidence_record, pack_prompts, render_demo, select_evidence, shots_summary
from .medr2 import MedR2
from .stage_runs import StageRuns, own_article_summary


def iterate(m: MedR2, questions: list[Question], runs: StageRuns | None = None) -> list[dict]:
    """Alg. 2 for every question together; returns, per question, the kept iteration and the history. ``runs``
    collects each stage's ranked documents per question and iteration."""
    cfg = m.cfg
    labels = m.classify(questions)
    reforms = m.reformulate(questions, labels)
    refs = m.references(questions) if (cfg.rerank or cfg.cot) else [None] * len(questions)
    state = [{"iterations": [], "cot": None, "prev_centroid": None, "done": False} for _ in questions]
    if cfg.cot and cfg.cot_in_first_query:  # Med-R²-CoT: a CoT from the question alone seeds iteration 1
        for s, c in zip(state, m.cots([[q.question, q.options, []] for q in questions])):
            s["cot"] = c["cot"]
    rounds = cfg.iterations if cfg.cot else 1
    for t in range(1, rounds + 1):
        active = [i for i, s in enumerate(state) if not s["done"]]
        if not active:
            break
        queries = [iteration_query(questions[i].question, reforms[i], state[i]["cot"], t, cfg.cot_in_first_query,
                                   questions[i].options, cfg.query) for i in active]
        candidates = m.retrieve(queries, [questions[i].exclude_pmid for i in active])
        coarse = m.coarse(m.rerank_queries([questions[i].question for i in active], queries), candidates)
        ranked = m.fine([questions[i] for i in active], [labels[i] for i in active], [refs[i] for i in active], coarse)
        selected = [select_evidence(m, hits) for hits in ranked]
        if cfg.cot:
            cots = m.cots([[questions[i].question, questions[i].options, [h["text"] for h in sel]]
                           for i, sel in zip(active, selected)])
        else:
            cots = [{"cot": None, "answer": None} for _ in active]
        for j, i in enumerate(active):
            st = state[i]
            cen = None
            if cfg.cot and "dense" in m.searcher.manifest:  # μ_t: only Alg. 2's loop reads it
                with m.stage("stability"):
                    emb = m.searcher.embeddings([h["passage"] for h in coarse[j]])
                cen = loop.centroid(np.asarray(emb)) if len(emb) else None
            mu = loop.stability(cen, st["prev_centroid"])
            acc = None
            if cfg.cot and cots[j]["answer"] and refs[i] is not None and refs[i]["label"]:
                acc = float(max(cots[j]["answer"], key=cots[j]["answer"].get) == refs[i]["label"])
            st["iterations"].append({
                "t": t, "query": queries[j], "doc_ids": [h["doc_id"] for h in candidates[j]],
                "coarse_ids": [h["doc_id"] for h in coarse[j]], "selected": [evidence_record(h) for h in selected[j]],
                "mu": mu, "acc": acc, "cot": cots[j]["cot"], "cot_answer": cots[j]["answer"],
            })
            if runs is not None:
                runs.add_iteration(questions[i].id, t, candidates[j], coarse[j], ranked[j] if cfg.rerank else None,
                                   selected[j])
            st["evidence"] = selected[j]
            st["cot"], st["prev_centroid"] = cots[j]["cot"], cen
            if acc is not None and loop.should_stop(acc, mu, cfg.delta):
                st["done"], st["stopped_at"] = True, t
            elif not candidates[j]:
                st["done"], st["stopped_at"] = True, t  # nothing retrieved: another round would find the same nothing
    for s, lab, ref, reform in zip(state, labels, refs, reforms):
        s.update(labels=lab, reference=ref, reformulation=reform)
        s.setdefault("stopped_at", None)
        s.pop("prev_centroid")
    return state


def demonstrations(m: MedR2, benchmark: str, demos: list[Demo], states: list[dict], scoring: str) -> list[str]:
    """The rendered demonstrations: each with its loop's final evidence and a rationale generated knowing its gold
    answer; a demonstration whose rationale concludes another answer is left out (``counts.demos_disagreeing``)."""
    if not m.cfg.cot or not demos:
        return []
    evidence = [[h["text"] for h in s.get("evidence", [])[: m.cfg.demo_evidence]] for s in states]
    rationales = m.demo_rationales([[d.question.question, d.question.options, ev, d.answer]
                                    for d, ev in zip(demos, evidence)])
    m.counts["demos_disagreeing"] += sum(not r["agrees"] for r in rationales)
    return [render_demo(benchmark, d.question, d.answer, ev, r["cot"], scoring)
            for d, ev, r in zip(demos, evidence, rationales) if r["agrees"]]


def _rerank(c) -> bool:
    return c.rerank


def _cot(c) -> bool:
    return c.cot


STAGES = (
    Stage("classify", "classify", ("classifier",), "question stem", "EBM category, question type",
          lambda c: c.classify),
    Stage("reformulate", "reformulate", ("reformulator",), "question stem, EBM category", "q_EBM",
          lambda c: c.reformulate),
    Stage("reference", None, ("reference",), "question, options", "reference answer (f_u's target, Alg. 2's Acc)",
          lambda c: c.rerank or c.cot),
    Stage("retrieve", "retrieve", (), "iteration query", "fused candidates"),
    Stage("own_rank", None, (), "question stem, own PubMed id", "rank the excluded own abstract would have had"),
    Stage("coarse", "rerank", ("relevance",), "rerank query, candidates", "relevance per candidate; top coarse_k",
          lambda c: c.rerank and c.coarse == "llm"),
    Stage("coarse", "rerank", (), "rerank query, candidates", "cross-encoder score per candidate; top coarse_k",
          lambda c: c.rerank and c.coarse == "cross_encoder"),
    Stage("evidence_level", "rerank", ("leveler",), "coarse documents", "evidence level (f_h)", _rerank),
    Stage("doc_type", "rerank", ("doc_typer",), "coarse documents", "document type (f_g)", _rerank),
    Stage("usefulness", "rerank", ("proxy",), "question, reference answer, coarse documents",
          "answer loss without and with each document (f_u)", _rerank),
    Stage("conflict", "rerank", ("conflict",), "pairs of top documents", "conflicting pairs", _rerank),
    Stage("cot", "cot", ("cot",), "question, options, selected evidence", "CoT and its answer", _cot),
    Stage("stability", "loop", (), "coarse documents", "centroid shift μ_t", _cot),
    Stage("demo_cot", "cot", ("cot",), "demonstration, its evidence and gold answer", "rationale", _cot, demos=True),
    Stage("pack", "apply", (), "evidence, demonstrations, reasoning", "prompt prefix within the window"),
)


@register("medr2", STAGES)
def prepare(m: MedR2, benchmark: str, questions: list[Question], demos: list[Demo],
            scoring: str = "letters", answer: str = "default") -> tuple[list[dict], dict]:
    """Evidence packs for ``questions`` (prompt prefix + provenance) and the run record; the demonstrations are
    rendered for ``scoring`` (letters: ``Answer: X``; generative: reasoning, then ``the answer is (X)``). ``answer``
    is the method's answer format (``medrag``: MedRAG's prompt numbers the documents itself)."""
    started = time.perf_counter()
    runs = StageRuns(m.searcher.retrievers)
    states = iterate(m, questions + [d.question for d in demos], runs)
    q_states, d_states = states[: len(questions)], states[len(questions):]
    demo_texts = demonstrations(m, benchmark, demos, d_states, scoring)
    medrag = answer == "medrag"
    packs = []
    with m.stage("pack"):
        reasoning = [s["cot"] if m.cfg.answer_with_cot else None for s in q_states]
        packings = pack_prompts(m, benchmark, questions, [s.get("evidence", []) for s in q_states], reasoning,
                                demo_texts, scoring, medrag)
        for q, s, r, p in zip(questions, q_states, reasoning, packings):
            m.counts["question_over_window"] += p.over_window
            runs.add_packed(q.id, p.used, s["stopped_at"] or len(s["iterations"]))
            packs.append({
                "prefix": p.prefix, "reasoning": r, "evidence": [evidence_record(h) for h in p.used],
                "effective_k": len(p.used), "n_demos": p.demos, "prompt_tokens": p.tokens, "cot": s["cot"],
                "iterations": s["iterations"], "stopped_at": s["stopped_at"], "labels": s["labels"],
                "reformulation": s["reformulation"], "reference": s["reference"],
            })
            if medrag:  # MedRAG's prompt numbers the documents itself (medr2_hooks.lmeval.medrag)
                packs[-1]["evidence_texts"] = [h["text"] for h in p.used]
    record = m.run_record(started, len(questions), len(demos))
    record["shots"] = shots_summary(packings, len(demo_texts))
    record["loop"] = loop_summary(q_states, m.cfg.iterations if m.cfg.cot else 1, m.cfg.delta)
    record["stage_runs"] = runs.for_items({q.id for q in questions})
    own = m.own_article_ranks(questions)  # PubMedQA: where the excluded own abstract would have ranked
    if own:
        record["own_article"] = own_article_summary(own)
    return packs, record


def loop_summary(states: list[dict], rounds: int, delta: float) -> dict:
    """Where Alg. 2 stopped (items per stopping iteration; ``none``: ran all ``rounds``), μ per iteration
    (quartiles over the items that reached it) and where it would have stopped under other δ
    (:func:`medr2_hooks.loop.delta_sensitivity`)."""
    stopped = {str(t): 0 for t in range(1, rounds + 1)} | {"none": 0}
    mus: dict[int, list[float]] = {}
    for s in states:
        stopped[str(s["stopped_at"]) if s["stopped_at"] else "none"] += 1
        for it in s["iterations"]:
            if it["mu"] is not None:
                mus.setdefault(it["t"], []).append(it["mu"])
    return {"stopped_at": stopped, "mu": {str(t): [round(float(q), 4) for q in np.quantile(v, [0.25, 0.5, 0.75])]
                                          for t, v in sorted(mus.items())},
            "delta_sensitivity": loop.delta_sensitivity(states, delta)}
