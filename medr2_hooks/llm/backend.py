"""The interface every LLM backend implements, and its usage counters.

Roles in Med-R² (classifier, reformulator, CoT generator, document typer, evidence leveler, reference model
``M_F``, usefulness proxy) each get a backend from config. Every call is batched over many prompts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass
class Usage:
    calls: int = 0
    prompts: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    by_role: Counter = field(default_factory=Counter)
    # closed-set menus read from one request's next-token distribution: labels the engine's top-k did not return
    # (each given the k-th probability, its bound) and the menus that had one
    labels_outside_top_k: int = 0
    menus_with_a_bound: int = 0

    def add(self, role: str, prompts: int, prompt_tokens: int, generated_tokens: int = 0) -> None:
        self.calls += 1
        self.prompts += prompts
        self.prompt_tokens += prompt_tokens
        self.generated_tokens += generated_tokens
        self.by_role[role] += prompts

    def to_json(self) -> dict:
        out = {"calls": self.calls, "prompts": self.prompts, "prompt_tokens": self.prompt_tokens,
               "generated_tokens": self.generated_tokens, "by_role": dict(self.by_role)}
        if self.menus_with_a_bound:
            out.update(labels_outside_top_k=self.labels_outside_top_k, menus_with_a_bound=self.menus_with_a_bound)
        return out


def menu_logprobs(tops: list[dict], wanted: list[set], usage: Usage) -> list[list[float]]:
    """Each menu's label log-probabilities from its prompt's next-token top-k (``tops``: ``{token: logprob}`` per
    prompt; ``wanted``: the keys each label may appear under). A label the engine did not return is below the k-th
    logprob, so it gets that logprob (an upper bound): counted in ``usage``, exact where every label is returned."""
    out = []
    for top in tops:
        floor = min(top.values()) if top else 0.0
        row = [max((top[k] for k in keys if k in top), default=None) for keys in wanted]
        missing = sum(v is None for v in row)
        if missing:
            usage.labels_outside_top_k += missing
            usage.menus_with_a_bound += 1
        out.append([floor if v is None else v for v in row])
    return out


@runtime_checkable
class Backend(Protocol):
    model_id: str  # with revision where known: what cache keys and manifests record
    usage: Usage

    def count_tokens(self, texts: list[str]) -> list[int]: ...

    def truncate(self, text: str, max_tokens: int) -> str: ...

    def chat(self, user: str, system: str | None = None) -> str:
        """The prompt string for one user turn (the model's chat template, or the plain text if it has none)."""
        ...

    def generate(self, prompts: list[str], max_new_tokens: int, stop: list[str] | None = None,
                 role: str = "generate") -> list[str]:
        """Greedy continuations, cut before the first stop string."""
        ...

    def score(self, prompts: list[str], continuations: list[str], role: str = "score") -> list[tuple[float, int]]:
        """``(sum of log-probabilities, number of tokens)`` of each continuation given its prompt."""
        ...

    # Optional, by backend (closed-set menus, medr2_hooks.llm.closed_set): ``score_choices(prompts, choices, role)``
    # (hf: one pass per prompt, every choice on its cached keys) and ``next_token_logprobs(prompts, choices, role)``
    # (vllm, served: one request per prompt, choices of one token read from its next-token distribution).


def cut_at_stop(text: str, stop: list[str] | None) -> str:
    """``text`` up to the first stop string, after leading blank lines (a reply that opens with a newline is
    not an empty reply)."""
    text = text.lstrip("\n")
    if not stop:
        return text
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=len(text))
    return text[:cut]
