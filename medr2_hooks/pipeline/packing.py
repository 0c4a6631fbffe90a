"""What every retrieval method does with its selected evidence: record it, fit it into the window, render it and
the demonstrations into the target's prompt, and close the pre-pass (:func:`finish`: the packs and the run record).
Shared by every pipeline (public, typed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..apply.pack import RESERVE, pack
from ..apply.prompts import (MEDRAG_SYSTEM, demonstration, generative_prompt, medrag_document, medrag_prompt,
                             question_prompt, with_reasoning)
from ..data.record import Question
from ..evidence.stage_runs import StageRuns, own_article_summary

if TYPE_CHECKING:
    from .toolbox import StageToolbox

EVIDENCE_KEYS = ("doc_id", "passage", "source_type", "evidence_level", "f_h", "f_g", "f_u", "F", "coarse", "scores",
                 "title")


def evidence_record(hit: dict) -> dict:
    """The provenance of one evidence unit as packs and sample logs keep it."""
    return {k: hit.get(k) for k in EVIDENCE_KEYS}


def select_evidence(m: "StageToolbox", ranked: list[dict]) -> list[dict]:
    """The best documents (by F, or retrieval order without the reranker) that fit the evidence share of ``w``."""
    tokens = m.target_tokens([h["text"] for h in ranked])
    chosen = pack(0, tokens, [], m.cfg.window, m.cfg.evidence_share, reserve=0).evidence
    return [ranked[i] for i in chosen]


EVIDENCE_HEAD, EVIDENCE_TAIL = "Evidence:\n", "\n"


def evidence_item(i: int, text: str) -> str:
    return f"[{i}] {text.strip()}\n"


def render_evidence(texts: list[str]) -> str:
    """The evidence block before a question: ``Evidence:``, one numbered line per unit, a blank line."""
    return EVIDENCE_HEAD + "".join(evidence_item(i, t) for i, t in enumerate(texts, 1)) + EVIDENCE_TAIL if texts else ""


@dataclass(frozen=True)
class Packing:
    """One question's prompt as packed: what goes before the question, and what was counted."""
    prefix: str  # the demonstrations and the evidence block (MedRAG's documents go in its own prompt: "")
    used: list[dict]  # the evidence units in the prompt, in order
    demos: int  # demonstrations in the prompt
    tokens: int  # the rendered prompt (chat template, instruction, cue) under the target's tokenizer
    over_window: bool
    skipped_demos: int  # demonstrations that did not fit beside this question's evidence


def pack_prompts(m: "StageToolbox", benchmark: str, questions: list[Question], evidence: list[list[dict]],
                 reasoning: list[str | None], demo_texts: list[str], scoring: str, medrag: bool = False
                 ) -> list[Packing]:
    """Fit each question's evidence and the demonstrations into the window, counting the prompt the target is sent:
    the question as its scoring renders it (letters: ``…Answer:``; generative: with the cue; MedRAG: its user turn
    and instruction), the chat template's own tokens when the target's tokenizer has one, the evidence as rendered,
    and the window's room for the answer (``answer_tokens`` and :data:`~medr2_hooks.apply.pack.RESERVE`)."""
    cfg = m.cfg
    if medrag:
        frames = [medrag_prompt([], q) for q in questions]
    elif scoring == "generative":
        frames = [generative_prompt(question_prompt(benchmark, q), r, list(q.options))
                  for q, r in zip(questions, reasoning)]
    else:
        frames = [with_reasoning(question_prompt(benchmark, q), r) for q, r in zip(questions, reasoning)]
    fixed = m.chat_overhead(MEDRAG_SYSTEM if medrag else None)
    head = m.target_tokens([EVIDENCE_HEAD + EVIDENCE_TAIL if not medrag else "Here are the relevant documents:\n\n"])[0]
    demo_tokens = m.target_tokens(demo_texts)
    out = []
    for q_tokens, units in zip(m.target_tokens(frames), evidence):
        render = (lambda i, h: medrag_document(i - 1, h.get("title"), h["text"])) if medrag else \
            (lambda i, h: evidence_item(i, h["text"]))
        ev_tokens = m.target_tokens([render(i, h) for i, h in enumerate(units, 1)])
        packed = pack(q_tokens + fixed + (head if units else 0), ev_tokens, demo_tokens, cfg.window,
                      cfg.evidence_share, RESERVE + cfg.answer_tokens)
        used = [units[i] for i in packed.evidence]
        prefix = "" if medrag else "".join(demo_texts[i] for i in packed.demos) + render_evidence([h["text"]
                                                                                                   for h in used])
        out.append(Packing(prefix, used, len(packed.demos), packed.tokens, packed.question_over_window,
                           packed.skipped_demos))
    return out


def shots_summary(packings: list[Packing], available: int) -> dict:
    """How many demonstrations reached each prompt (of ``available`` rendered ones): the mean, the least, the most,
    how many prompts got none, and how many times one was skipped for want of room."""
    shots = [p.demos for p in packings]
    return {"available": available, "mean": round(sum(shots) / len(shots), 2) if shots else None,
            "min": min(shots, default=None), "max": max(shots, default=None),
            "zero_shot": sum(n == 0 for n in shots) if available else len(shots),
            "skipped": sum(p.skipped_demos for p in packings)}


def render_demo(benchmark: str, q: Question, answer: str, evidence: list[str], cot: str | None,
                scoring: str = "letters") -> str:
    """A solved demonstration: its evidence, its question, its reasoning and its answer, as ``scoring`` asks."""
    return (f"{render_evidence(evidence)}"
            f"{demonstration(question_prompt(benchmark, q), answer, cot, scoring, list(q.options))}\n\n")


def finish(m: "StageToolbox", benchmark: str, questions: list[Question], evidence: list[list[dict]],
           reasoning: list[str | None], runs: StageRuns, started: float, scoring: str, *, kept: list[int],
           provenance: list[dict], demo_texts: list[str] = (), demos: int = 0, medrag: bool = False,
           evidence_keys: tuple[str, ...] = ()) -> tuple[list[dict], dict]:
    """The tail of every pipeline: each question's ``evidence`` and the rendered demonstrations packed into the window
    (:func:`pack_prompts`, the ``pack`` stage), its pack (prefix, reasoning, the evidence's provenance with the
    ``evidence_keys`` a method adds, then the method's own ``provenance``), the packed run (``kept``: the iteration
    the method kept), and the run record (``demos``: demonstrations run through the pre-pass)."""
    packs = []
    with m.stage("pack"):
        packings = pack_prompts(m, benchmark, questions, evidence, reasoning, list(demo_texts), scoring, medrag)
        for q, r, p, t, extra in zip(questions, reasoning, packings, kept, provenance):
            m.counts["question_over_window"] += p.over_window
            runs.add_packed(q.id, p.used, t)
            packs.append({"prefix": p.prefix, "reasoning": r,
                          "evidence": [{**evidence_record(h), **{k: h[k] for k in evidence_keys}} for h in p.used],
                          "effective_k": len(p.used), "n_demos": p.demos, "prompt_tokens": p.tokens, **extra})
            if medrag:  # MedRAG's prompt numbers the documents itself (medr2_hooks.lmeval.medrag)
                packs[-1]["evidence_texts"] = [h["text"] for h in p.used]
    record = m.run_record(started, len(questions), demos)
    record["shots"] = shots_summary(packings, len(demo_texts))
    record["stage_runs"] = runs.for_items({q.id for q in questions})
    own = m.own_article_ranks(questions)  # PubMedQA: where the excluded own abstract would have ranked
    if own:
        record["own_article"] = own_article_summary(own)
    return packs, record
