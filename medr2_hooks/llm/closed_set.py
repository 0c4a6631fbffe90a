"""Closed-set decisions: a distribution over a fixed label set for each prompt.

``closed_set`` (default): the prompt lists the labels as a lettered menu (:func:`lettered`: "A. meta-analysis",
"B. systematic review", ...) and each label's probability is a softmax over the menu of a length-fair score
(``label_scoring``):

- ``letters`` (default): the log-likelihood of the label's *letter* — one token per label, the way lm-eval
  scores MCQ options; for instruction-following models.
- ``token_mean``: the label name's mean log-likelihood per token.

Scoring the names by their *summed* log-likelihood (the earlier rule) made a multi-token label ("randomized
controlled trial", "cause-and-effect") lose probability to a one-token label for its length alone.
``bench/bench_label_bias.py`` measures each rule on 200 passages: with Gemma-3-270M (a base model) ``letters``
moved 143/200 evidence-level and 168/200 document-type decisions but mostly answers the first letter (a
position bias of small models, which instruction-tuned paper-scale models do not share), and ``token_mean``
over-rewards multi-token names (their later tokens are nearly certain: 199/200 "non-randomized controlled
trial", 200/200 "cause-and-effect"), so ``letters`` is the default everywhere. One prefill per menu on every
backend: ``hf`` scores a prompt once and every label on its cached keys (``score_choices``); vLLM and served
endpoints read the labels' letters from one request's next-token distribution (``next_token_logprobs``: their
prompt-log-probability path would skip the prefix cache and compute the prompt once per label). Exactly the
distribution Eq. 4 needs. ``label_distribution`` stays for single-token label sets (yes/no judges).
``generate``: free generation parsed strictly (the first label named, as a whole word); a reply naming no label
is a parse failure, recorded and handled by the caller's documented rule (a uniform distribution and the
fallback label).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

MODES = ("closed_set", "generate")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
LABEL_SCORINGS = ("letters", "token_mean")
# Part of every closed-set stage's cache config (with the rule): decisions made another way are not reused.
# v2: after a prompt that ends in whitespace (a chat template's assistant header, "...assistant\n") a label is read
# as the model writes it there, without a leading space ("A", not " A", which a chat model almost never emits).
LABEL_SCORING_VERSION = "menu-v2"


def lettered(labels: list[str], descriptions: dict[str, str] | None = None) -> str:
    """The menu a closed-set prompt shows: one line per label, identified by a single letter."""
    if len(labels) > len(LETTERS):
        raise ValueError(f"at most {len(LETTERS)} labels in a lettered menu, found {len(labels)}")
    return "\n".join(f"{LETTERS[i]}. {label}" + (f": {descriptions[label]}" if descriptions else "")
                     for i, label in enumerate(labels))


def answer_instruction(what: str, scoring: str = "letters") -> str:
    """The line before a menu's answer cue."""
    return f"Answer with the {'letter' if scoring == 'letters' else 'name'} of the {what}."


def choice_distribution(backend, prompts: list[str], labels: list[str], role: str,
                        scoring: str = "letters") -> np.ndarray:
    """``[len(prompts), len(labels)]`` probabilities over a menu (the prompts show :func:`lettered` ``(labels)``
    and end with the answer cue): from each label's letter, or its name's mean log-likelihood per token."""
    if scoring == "letters":
        return label_distribution(backend, prompts, list(LETTERS[: len(labels)]), role)
    if scoring != "token_mean":
        raise ValueError(f"label_scoring must be one of {', '.join(LABEL_SCORINGS)}, found {scoring!r}")
    lengths = np.array(backend.count_tokens([f" {label}" for label in labels]), dtype=np.float64)  # ± one space
    return softmax(label_loglik(backend, prompts, labels, role) / np.maximum(lengths, 1))


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


def label_loglik(backend, prompts: list[str], labels: list[str], role: str, sep: str | None = None) -> np.ndarray:
    """``[len(prompts), len(labels)]`` summed log-likelihoods of ``sep + label`` after each prompt; ``sep`` None:
    a space after text (``...Answer: A``), nothing after whitespace (a chat template's ``assistant\n``)."""
    if not prompts:
        return np.zeros((0, len(labels)))
    if sep is None:
        out = np.zeros((len(prompts), len(labels)))
        for joiner in (" ", ""):
            idx = [i for i, p in enumerate(prompts) if (p[-1:].isspace()) == (joiner == "")]
            if idx:
                out[idx] = label_loglik(backend, [prompts[i] for i in idx], labels, role, joiner)
        return out
    continuations = [f"{sep}{label}" for label in labels]
    if hasattr(backend, "score_choices"):  # one pass per prompt, choices scored on its cached keys/values
        return np.array(backend.score_choices(prompts, continuations, role=role), dtype=np.float64)
    if hasattr(backend, "next_token_logprobs"):  # vLLM, served: one request per prompt, its next-token top-k
        got = backend.next_token_logprobs(prompts, continuations, role=role)
        if got is not None:
            return np.array(got, dtype=np.float64)
    # Labels of several tokens (token_mean scoring) are scored as sequences, one per label: a served engine computes
    # such a request's prompt without its prefix cache, so this path costs a prefill per label.
    scores = backend.score([p for p in prompts for _ in labels], continuations * len(prompts), role=role)
    return np.array([s for s, _ in scores], dtype=np.float64).reshape(len(prompts), len(labels))


def label_distribution(backend, prompts: list[str], labels: list[str], role: str, sep: str | None = None) -> np.ndarray:
    """``[len(prompts), len(labels)]`` probabilities from the summed log-likelihood of ``sep + label`` (for
    label sets of one token each, such as yes/no)."""
    if not prompts:
        return np.zeros((0, len(labels)))
    return softmax(label_loglik(backend, prompts, labels, role, sep))


def parse_label(text: str, labels: list[str]) -> str | None:
    """The label a reply picks: its menu letter at the start ("B", "(B)", "B. therapy"), else the first label
    named in ``text`` as a whole word (case-insensitive; longer labels win ties)."""
    letter = re.match(r"\s*\(?([A-Z])(?:[.):]|\s*$)", text)
    if letter and LETTERS.index(letter.group(1)) < len(labels):
        return labels[LETTERS.index(letter.group(1))]
    found = []
    for label in labels:
        m = re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", text, re.IGNORECASE)
        if m:
            found.append((m.start(), -len(label), label))
    return min(found)[2] if found else None


def decide(backend, prompts: list[str], labels: list[str], role: str, mode: str = "closed_set",
           fallback: str | None = None, scoring: str = "letters") -> list[Decision]:
    if mode == "closed_set":
        probs = choice_distribution(backend, prompts, labels, role, scoring)
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
