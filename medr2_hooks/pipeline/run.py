"""Alg. 2 over a whole task, then packing: :func:`prepare` returns one evidence pack per question."""

from __future__ import annotations

import time

import numpy as np

from .. import cot as cot_stage
from .. import loop
from ..apply.pack import pack
from ..apply.prompts import demonstration, question_prompt, with_reasoning
from ..data.record import Question
from ..reformulate import iteration_query
from .medr2 import GENERATION_VERSION, MedR2


def _evidence_record(h: dict) -> dict:
    keys = ("doc_id", "passage", "source_type", "evidence_level", "f_h", "f_g", "f_u", "F", "coarse", "scores", "title")
    return {k: h.get(k) for k in keys}


def iterate(m: MedR2, questions: list[Question], pmids: list[str | None]) -> list[dict]:
    """Alg. 2 for every question together; returns, per question, the kept iteration and the history."""
    cfg = m.cfg
    labels = m.classify(questions)
    reforms = m.reformulate(questions, labels)
    refs = m.references(questions) if (cfg.rerank or cfg.cot) else [None] * len(questions)
    state = [{"iterations": [], "cot": None, "prev_centroid": None, "done": False} for _ in questions]
    cot_config = {"model": m.ids["cot"], "max_new_tokens": cfg.cot_max_new_tokens, "version": GENERATION_VERSION}
    if cfg.cot and cfg.cot_in_first_query:  # Med-R²-CoT: a CoT from the question alone seeds iteration 1
        seeds = m.cached("cot", [[q.question, q.options, []] for q in questions], cot_config, lambda xs: _cots(m, xs))
        for s, c in zip(state, seeds):
            s["cot"] = c["cot"]
    rounds = cfg.iterations if cfg.cot else 1
    for t in range(1, rounds + 1):
        active = [i for i, s in enumerate(state) if not s["done"]]
        if not active:
            break
        queries = [iteration_query(questions[i].question, reforms[i], state[i]["cot"], t, cfg.cot_in_first_query,
                                   questions[i].options)
                   for i in active]
        candidates = m.retrieve(queries, [pmids[i] for i in active])
        coarse = m.coarse(m.rerank_queries([questions[i].question for i in active], queries), candidates)
        ranked = m.fine([questions[i] for i in active], [labels[i] for i in active], [refs[i] for i in active], coarse)
        selected = [select_evidence(m, hits) for hits in ranked]
        if cfg.cot:
            cots = m.cached("cot", [[questions[i].question, questions[i].options, [h["text"] for h in sel]]
                                    for i, sel in zip(active, selected)], cot_config, lambda xs: _cots(m, xs))
        else:
            cots = [{"cot": None, "answer": None} for _ in active]
        for j, i in enumerate(active):
            st = state[i]
            with m.stage("stability"):
                emb = m.searcher.embeddings([h["passage"] for h in coarse[j]]) if "dense" in m.searcher.manifest else []
            cen = loop.centroid(np.asarray(emb)) if len(emb) else None
            mu = loop.stability(cen, st["prev_centroid"])
            acc = None
            if cfg.cot and cots[j]["answer"] and refs[i] is not None and refs[i]["label"]:
                acc = float(max(cots[j]["answer"], key=cots[j]["answer"].get) == refs[i]["label"])
            st["iterations"].append({
                "t": t, "query": queries[j], "doc_ids": [h["doc_id"] for h in candidates[j]],
                "coarse_ids": [h["doc_id"] for h in coarse[j]], "selected": [_evidence_record(h) for h in selected[j]],
                "mu": mu, "acc": acc, "cot": cots[j]["cot"], "cot_answer": cots[j]["answer"],
            })
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


def _cots(m: MedR2, items: list) -> list[dict]:
    backend = m.llm("cot")
    prompts = [cot_stage.cot_prompt(backend, q, o, ev) for q, o, ev in items]
    texts = cot_stage.generate_cot(backend, prompts, m.cfg.cot_max_new_tokens)
    answers = cot_stage.cot_answers(backend, prompts, texts, [list(o) for _, o, _ in items])
    return [{"cot": c, "answer": a} for c, a in zip(texts, answers)]


def select_evidence(m: MedR2, ranked: list[dict]) -> list[dict]:
    """The best documents (by F, or retrieval order without the reranker) that fit the evidence share of ``w``."""
    tokens = m.target_tokens([h["text"] for h in ranked])
    chosen = pack(0, tokens, [], m.cfg.window, m.cfg.evidence_share, reserve=0).evidence
    return [ranked[i] for i in chosen]


def render_evidence(texts: list[str]) -> str:
    return "Evidence:\n" + "\n".join(f"[{i}] {t.strip()}" for i, t in enumerate(texts, 1)) + "\n\n" if texts else ""


def render_demo(benchmark: str, q: Question, answer: str, evidence: list[str], cot: str | None,
                scoring: str = "letters") -> str:
    return f"{render_evidence(evidence)}{demonstration(question_prompt(benchmark, q), answer, cot, scoring)}\n\n"


def prepare(m: MedR2, benchmark: str, questions: list[Question], pmids: list[str | None],
            demos: list[Question], demo_answers: list[str], demo_pmids: list[str | None],
            scoring: str = "letters") -> tuple[list[dict], dict]:
    """Evidence packs for ``questions`` (prompt prefix + provenance) and the run record; the demonstrations are
    rendered for ``scoring`` (letters: ``Answer: X``; generative: reasoning, then ``the answer is (X)``)."""
    started = time.perf_counter()
    states = iterate(m, questions + demos, pmids + demo_pmids)
    q_states, d_states = states[: len(questions)], states[len(questions):]
    demo_texts = [render_demo(benchmark, q, a, [h["text"] for h in s.get("evidence", [])[: m.cfg.demo_evidence]],
                              s["cot"], scoring) for q, a, s in zip(demos, demo_answers, d_states)] if m.cfg.cot else []
    demo_tokens = m.target_tokens(demo_texts)
    packs = []
    with m.stage("pack"):
        reasoning = [s["cot"] if m.cfg.answer_with_cot else None for s in q_states]
        question_tokens = m.target_tokens([with_reasoning(question_prompt(benchmark, q), r)
                                           for q, r in zip(questions, reasoning)])
        for q_tokens, s, r in zip(question_tokens, q_states, reasoning):
            evidence = s.get("evidence", [])
            ev_tokens = m.target_tokens([f"[{i}] {h['text']}\n" for i, h in enumerate(evidence, 1)])
            packed = pack(q_tokens, ev_tokens, demo_tokens, m.cfg.window, m.cfg.evidence_share)
            m.counts["question_over_window"] += packed.question_over_window
            used = [evidence[i] for i in packed.evidence]
            prefix = "".join(demo_texts[i] for i in packed.demos) + render_evidence([h["text"] for h in used])
            packs.append({
                "prefix": prefix, "reasoning": r, "evidence": [_evidence_record(h) for h in used], "effective_k": len(used),
                "n_demos": len(packed.demos), "prompt_tokens": packed.tokens, "cot": s["cot"],
                "iterations": s["iterations"], "stopped_at": s["stopped_at"], "labels": s["labels"],
                "reformulation": s["reformulation"], "reference": s["reference"],
            })
    return packs, m.run_record(started, len(questions), len(demos))
