"""Generative (chain-of-thought) variants with strict answer extraction.

The prompt asks the model to reason and finish with ``the answer is (X)``. :func:`extract_choice` accepts
only an explicit statement of one option label — ``answer is (C)``, ``answer is C``, ``Answer: C`` — and
takes the last one in the text. Anything else is :data:`INVALID`: scored wrong and counted in the
``invalid`` metric, never replaced by a default letter.
"""

from __future__ import annotations

import re

from ..apply import prompts
from ..data.record import Record

INVALID = "[invalid]"


def _pattern(labels: list[str]) -> re.Pattern:
    alt = "|".join(re.escape(label) for label in sorted(labels, key=len, reverse=True))
    return re.compile(
        rf"(?:answer\s+is|answer\s*:)\s*:?\s*(?:option\s+)?[\(\[]?\s*({alt})\s*[\)\]]?(?![\w])",
        re.IGNORECASE,
    )


def extract_choice(text: str, labels: list[str]) -> str:
    """The last explicitly stated option label in ``text``, or :data:`INVALID`."""
    matches = _pattern(labels).findall(text)
    if not matches:
        return INVALID
    found = matches[-1]
    return next(label for label in labels if label.lower() == found.lower())


def doc_to_text(doc: dict) -> str:
    return prompts.generative_prompt(prompts.question_prompt(doc["benchmark"], Record.from_doc(doc).public()))


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    prediction = extract_choice(results[0], list(doc["choice_labels"]))
    return {"acc": float(prediction == doc["answer"]), "invalid": float(prediction == INVALID)}


def extract_json_choice(text: str, labels: list[str], key: str = "answer_choice") -> str:
    """The option a JSON answer names under ``key`` (the last JSON object in ``text`` that has it), or
    :data:`INVALID`: no such object, or a value that is not exactly one option label (case-insensitive; "A."
    or "(A)" accepted, "A or B" not)."""
    import json

    decoder, found = json.JSONDecoder(), None
    for start in (i for i, ch in enumerate(text) if ch == "{"):
        try:
            obj, _ = decoder.raw_decode(text[start:])
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get(key), str):
            found = obj[key]
    if found is None:
        return INVALID
    value = re.sub(r"^[\(\[]?\s*(.*?)\s*[\)\].]?$", r"\1", found.strip())
    return next((label for label in labels if label.lower() == value.lower()), INVALID)


def process_results_json(doc: dict, results: list[str]) -> dict[str, float]:
    prediction = extract_json_choice(results[0], list(doc["choice_labels"]))
    return {"acc": float(prediction == doc["answer"]), "invalid": float(prediction == INVALID)}
