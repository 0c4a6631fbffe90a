"""What every retrieval method does with its selected evidence: record it, fit it into the window, render it and
the demonstrations into the target's prompt. Shared by the Med-R² and LLM-AMT pipelines (public, typed)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..apply.pack import pack
from ..apply.prompts import demonstration, question_prompt
from ..data.record import Question

if TYPE_CHECKING:
    from .medr2 import MedR2

EVIDENCE_KEYS = ("doc_id", "passage", "source_type", "evidence_level", "f_h", "f_g", "f_u", "F", "coarse", "scores",
                 "title")


def evidence_record(hit: dict) -> dict:
    """The provenance of one evidence unit as packs and sample logs keep it."""
    return {k: hit.get(k) for k in EVIDENCE_KEYS}


def select_evidence(m: "MedR2", ranked: list[dict]) -> list[dict]:
    """The best documents (by F, or retrieval order without the reranker) that fit the evidence share of ``w``."""
    tokens = m.target_tokens([h["text"] for h in ranked])
    chosen = pack(0, tokens, [], m.cfg.window, m.cfg.evidence_share, reserve=0).evidence
    return [ranked[i] for i in chosen]


def render_evidence(texts: list[str]) -> str:
    return "Evidence:\n" + "\n".join(f"[{i}] {t.strip()}" for i, t in enumerate(texts, 1)) + "\n\n" if texts else ""


def render_demo(benchmark: str, q: Question, answer: str, evidence: list[str], cot: str | None,
                scoring: str = "letters") -> str:
    """A solved demonstration: its evidence, its question, its reasoning and its answer, as ``scoring`` asks."""
    return f"{render_evidence(evidence)}{demonstration(question_prompt(benchmark, q), answer, cot, scoring)}\n\n"
