"""The Med-R² pipeline and its ablations (the Table 10 switches, Med-R²-CoT, vanilla RAG, MedRAG): Algorithm 2 over
the whole task (:func:`medr2_hooks.loop.algorithm2.iterate`), demonstrations solved through the same loop, then
packing. :func:`prepare` returns one evidence pack per question and the pre-pass record, with every stage's ranked
documents per iteration (``record["stage_runs"]``: what ``medr2 evidence`` scores against gold evidence)."""

from __future__ import annotations

import time

import numpy as np

from .. import loop
from ..data.record import Demo, Question
from ..evidence.stage_runs import StageRuns
from ..loop.algorithm2 import iterate
from .declare import register
from .packing import finish, render_demo
from .stages import (CLASSIFY, COARSE_CROSS_ENCODER, COARSE_LLM, CONFLICT, COT, DEMO_COT, DOC_TYPE, EVIDENCE_LEVEL,
                     OWN_RANK, PACK, REFERENCE, REFORMULATE, RETRIEVE, STABILITY, USEFULNESS)
from .toolbox import StageToolbox


def demonstrations(m: StageToolbox, benchmark: str, demos: list[Demo], states: list[dict], scoring: str) -> list[str]:
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


STAGES = (CLASSIFY, REFORMULATE, REFERENCE, RETRIEVE, OWN_RANK, COARSE_LLM, COARSE_CROSS_ENCODER, EVIDENCE_LEVEL,
          DOC_TYPE, USEFULNESS, CONFLICT, COT, STABILITY, DEMO_COT, PACK)


@register("medr2", STAGES)
def prepare(m: StageToolbox, benchmark: str, questions: list[Question], demos: list[Demo],
            scoring: str = "letters", answer: str = "default") -> tuple[list[dict], dict]:
    """Evidence packs for ``questions`` (prompt prefix + provenance) and the run record; the demonstrations are
    rendered for ``scoring`` (letters: ``Answer: X``; generative: reasoning, then ``the answer is (X)``). ``answer``
    is the method's answer format (``medrag``: MedRAG's prompt numbers the documents itself)."""
    started = time.perf_counter()
    runs = StageRuns(m.searcher.retrievers)
    states = iterate(m, questions + [d.question for d in demos], runs)
    q_states, d_states = states[: len(questions)], states[len(questions):]
    demo_texts = demonstrations(m, benchmark, demos, d_states, scoring)
    reasoning = [s["cot"] if m.cfg.answer_with_cot else None for s in q_states]
    provenance = [{"cot": s["cot"], "iterations": s["iterations"], "stopped_at": s["stopped_at"],
                   "labels": s["labels"], "reformulation": s["reformulation"], "reference": s["reference"]}
                  for s in q_states]
    packs, record = finish(m, benchmark, questions, [s.get("evidence", []) for s in q_states], reasoning, runs,
                           started, scoring, kept=[s["stopped_at"] or len(s["iterations"]) for s in q_states],
                           provenance=provenance, demo_texts=demo_texts, demos=len(demos), medrag=answer == "medrag")
    record["loop"] = loop_summary(q_states, m.cfg.iterations if m.cfg.cot else 1, m.cfg.delta)
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
