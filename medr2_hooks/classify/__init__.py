"""Question formulation, step 1: classify each question on two axes (paper §3.1, Tables 2–3).

- EBM category: diagnosis, therapy, prognosis, etiology, prevention, cost — or ``other`` when none fits.
- General question type (12): factual … hypothetical; it decides which document types ``f_g`` rewards.

Prompts are ours; the model answers with a label (closed-set scoring by default, see ``llm.closed_set``).
A generation that names no label falls back to ``other`` / ``factual`` with a uniform distribution and is
counted as a parse failure.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..llm.closed_set import answer_instruction, decide, lettered

EBM_CATEGORIES = {
    "diagnosis": "identifying a disease or condition from findings, or the accuracy of a diagnostic test",
    "therapy": "choosing or judging a treatment, drug or intervention",
    "prognosis": "the likely course, outcome or complication of a condition",
    "etiology": "the cause, mechanism, risk factor or pathogen behind a condition",
    "prevention": "screening, vaccination or measures that prevent a disease",
    "cost": "costs or cost-effectiveness of care",
    "other": "none of the above (basic science, ethics, anatomy, regulations, ...)",
}

QUESTION_TYPES = {
    "factual": "asks for a fact",
    "referential": "asks about something referred to in context",
    "definition": "asks what a term means",
    "explanatory": "asks why or how something happens",
    "descriptive": "asks for a description of features or characteristics",
    "directive": "asks for guidance or a recommendation",
    "opinion": "asks about feelings, attitudes or preferences",
    "procedural": "asks for the steps of a task",
    "comparative": "asks how two or more things differ",
    "evaluative": "asks to judge the validity or quality of a statement",
    "verification": "asks to confirm whether something is true",
    "hypothetical": "describes a scenario and asks what would follow",
}


@dataclass(frozen=True)
class QueryLabels:
    ebm: str
    ebm_probs: dict[str, float]
    qtype: str
    qtype_probs: dict[str, float]
    parsed: bool = True

    def to_json(self) -> dict:
        return {"ebm": self.ebm, "ebm_probs": self.ebm_probs, "qtype": self.qtype, "qtype_probs": self.qtype_probs,
                "parsed": self.parsed}


def ebm_prompt(question: str, scoring: str = "letters") -> str:
    return ("Sort the medical question into one evidence-based-medicine category.\n"
            f"Categories:\n{lettered(list(EBM_CATEGORIES), EBM_CATEGORIES)}\n\nQuestion: {question}\n"
            f"{answer_instruction('category', scoring)}\nCategory:")


def qtype_prompt(question: str, scoring: str = "letters") -> str:
    return ("Sort the question into one general question type.\n"
            f"Types:\n{lettered(list(QUESTION_TYPES), QUESTION_TYPES)}\n\nQuestion: {question}\n"
            f"{answer_instruction('type', scoring)}\nType:")


def classify(backend, questions: list[str], mode: str = "closed_set", scoring: str = "letters") -> list[QueryLabels]:
    ebm = decide(backend, [ebm_prompt(q, scoring) for q in questions], list(EBM_CATEGORIES), "classifier", mode,
                 "other", scoring)
    qtype = decide(backend, [qtype_prompt(q, scoring) for q in questions], list(QUESTION_TYPES), "classifier", mode,
                   "factual", scoring)
    return [QueryLabels(e.label, e.probs, t.label, t.probs, e.parsed and t.parsed) for e, t in zip(ebm, qtype)]
