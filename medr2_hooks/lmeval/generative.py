"""Generative (chain-of-thought) variants: the target reasons and states its answer, read strictly.

The prompt asks the model to reason and finish with ``the answer is (X)`` (naming the possible answers when they are
words: yes, no, maybe). Each reply is read twice (:mod:`medr2_hooks.lmeval.answers`), as lm-eval's generative
multiple-choice tasks report a strict and a flexible extraction: ``acc`` (the headline) counts only an explicit
statement of one option; ``acc_flexible`` also takes an answer statement naming an option's text or a bracketed
label. A reply neither reads is :data:`INVALID`: wrong, and counted (``invalid``, ``invalid_flexible``), never a
default letter. MedRAG's JSON answers (``medrag``) are read by :func:`~medr2_hooks.lmeval.answers.read_json_choice`
and beside it by MIRAGE's own rule (``acc_mirage``), so a MIRAGE cell is compared like for like.
"""

from __future__ import annotations

from ..apply import prompts
from ..data.record import Record
from .answers import INVALID, read_flexible, read_json_choice, read_mirage, read_statement



def extract_choice(text: str, labels: list[str]) -> str:
    """The option the last explicit answer statement in ``text`` names, or :data:`INVALID` (the strict reading)."""
    return read_statement(text, labels)


def extract_json_choice(text: str, labels: list[str], key: str = "answer_choice") -> str:
    """The option a JSON answer names under ``key`` (options known by label only), or :data:`INVALID`."""
    return read_json_choice(text, {label: "" for label in labels}, key)


def _options(doc: dict) -> dict[str, str]:
    return dict(zip(doc["choice_labels"], doc.get("choice_texts") or [""] * len(doc["choice_labels"])))


def doc_to_text(doc: dict) -> str:
    return prompts.generative_prompt(prompts.question_prompt(doc["benchmark"], Record.from_doc(doc).public()),
                                     labels=list(doc["choice_labels"]))


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    strict = read_statement(results[0], list(doc["choice_labels"]))
    flexible = read_flexible(results[0], _options(doc))
    return {"acc": float(strict == doc["answer"]), "invalid": float(strict == INVALID),
            "acc_flexible": float(flexible == doc["answer"]), "invalid_flexible": float(flexible == INVALID)}


def process_results_json(doc: dict, results: list[str]) -> dict[str, float]:
    """MedRAG's JSON answer: strict accuracy (invalid = wrong, counted) and MIRAGE's scorer's accuracy beside it."""
    strict = read_json_choice(results[0], _options(doc))
    mirage = read_mirage(results[0], list(doc["choice_labels"]))
    return {"acc": float(strict == doc["answer"]), "invalid": float(strict == INVALID),
            "acc_mirage": float(mirage == doc["answer"])}
