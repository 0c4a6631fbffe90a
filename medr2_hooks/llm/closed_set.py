"""Closed-set decisions: a distribution over a fixed label set for each prompt.

``closed_set`` (default): the log-likelihood of each label as the continuation of the prompt, softmaxed over
the label set — one batched scoring pass, works with small base models, and gives exactly the
distribution Eq. 4 needs. ``generate``: free generation parsed strictly (the first label named, as a whole
word); a reply naming no label is a parse failure, recorded and handled by the caller's documented rule
(a uniform distribution and the fallback label).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

MODES = ("closed_set", "generate")


@dataclass(frozen=True)
class Decision:
    label: str
    probs: dict[str, float]
    parsed: bool = True  # False: generation named no label; probs are uniform, label is the fallback

    def to_json(self) -> dict:
        return {"label": self.label, "probs": self.probs, "parsed": self.parsed}


def softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def label_distribution(backend, prompts: list[str], labels: list[str], role: str, sep: str = " ") -> np.ndarray:
    """``[len(prompts), len(labels)]`` probabilities from the summed log-likelihood of ``sep + label``."""
    if not prompts:
        return np.zeros((0, len(labels)))
    continuations = [f"{sep}{label}" for label in labels]
    if hasattr(backend, "score_choices"):  # one pass per prompt, choices scored on its cached keys/values
        return softmax(np.array(backend.score_choices(prompts, continuations, role=role), dtype=np.float64))
    scores = backend.score([p for p in prompts for _ in labels], continuations * len(prompts), role=role)
    return softmax(np.array([s for s, _ in scores], dtype=np.float64).reshape(len(prompts), len(labels)))


def parse_label(text: str, labels: list[str]) -> str | None:
    """The first label named in ``text`` as a whole word (case-insensitive; longer labels win ties)."""
    found = []
    for label in labels:
        m = re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", text, re.IGNORECASE)
        if m:
            found.append((m.start(), -len(label), label))
    return min(found)[2] if found else None


def decide(backend, prompts: list[str], labels: list[str], role: str, mode: str = "closed_set",
           fallback: str | None = None) -> list[Decision]:
    if mode == "closed_set":
        probs = label_distribution(backend, prompts, labels, role)
        return [Decision(labels[int(np.argmax(p))], dict(zip(labels, map(float, p)))) for p in probs]
    if mode != "generate":
        raise ValueError(f"unknown decision mode {mode!r}; valid: {', '.join(MODES)}")
    uniform = {label: 1.0 / len(labels) for label in labels}
    out = []
    for reply in backend.generate(prompts, max_new_tokens=12, stop=["\n"], role=role):
        label = parse_label(reply, labels)
        if label is None:
            out.append(Decision(fallback or labels[-1], uniform, parsed=False))
        else:
            out.append(Decision(label, {lab: float(lab == label) for lab in labels}))
    return out
