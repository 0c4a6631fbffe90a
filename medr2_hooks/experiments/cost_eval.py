"""The lines of a cost estimate (:mod:`.cost`), and the evaluation's: what the target is sent.

A :class:`Line` is one stage's requests, prompt tokens and generated tokens for one role and model. The pre-pass's
lines come from running the pipeline itself against counting stand-ins (:mod:`.cost_run`); the evaluation's from
the prompts lm-eval sends: a retrieval run's packed prompts as the pre-pass measured them (evidence,
demonstrations, reasoning and the chat template within the window), a run without retrieval's question prompts
rendered on a sample of its items. ``prompt_tokens_unique`` counts each distinct prompt once (what a server with
prefix caching computes: vLLM's default). Work two runs of a sweep share through the stage cache carries the same
``share`` key; the evaluation is never shared.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .. import data, methods
from ..apply import prompts as P
from .cost_sizes import Tokens

SAMPLE_ITEMS = 200  # items whose evaluation prompts are rendered and counted (evenly spaced over the run's items)
LM_EVAL_MAX_GEN_TOKS = 256  # lm-eval's default max_gen_toks when a generative run sets none


@dataclass
class Line:
    phase: str  # prepass | eval
    stage: str
    role: str
    model: str
    items: float  # what the stage is asked: questions, (query, document) pairs, documents, document sets
    requests: float  # prompts sent (a menu of one-token labels: one; of longer names on a served role: one per label)
    prompt_tokens: float
    prompt_tokens_unique: float  # each distinct prompt once (prefix caching)
    generated_tokens: float
    share: str | None = None  # work another run with the same key does identically (the stage cache); None: own
    endpoint: str | None = None  # a served role's server (base_url without credentials); None: in process

    def to_json(self) -> dict:
        return {k: (round(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def evaluation(benchmark: str, items: list, target: Tokens, scoring: str, chat: bool, max_gen: int,
               answer: str = "default", packed: float | None = None) -> Line:
    """The target's requests: one generation per item (generative) or one log-likelihood per option (letters).
    ``packed``: a retrieval run's mean packed prompt (as the pre-pass counted it); else the question prompt of
    ``answer``'s format (``medrag``: MedRAG's prompt and system turn), the cue and the chat template."""
    sample = items[:: max(1, len(items) // SAMPLE_ITEMS)][:SAMPLE_ITEMS]
    free = scoring == "generative" or data.benchmark(benchmark).style in methods.FREE_TEXT_STYLES
    if packed is not None:
        prompt = packed
    else:
        if answer == "medrag":
            prompt = target.mean([P.medrag_prompt([], q) for q in sample]) + _tokens(target, P.MEDRAG_SYSTEM)
        else:
            prompt = target.mean([P.question_prompt(benchmark, q) for q in sample])
        if free and answer != "medrag":
            prompt += _tokens(target, P.COT_CUE)
        if chat:
            prompt += _tokens(target, target.chat(""))
    n = float(len(items))
    if free:
        return Line("eval", "answer", "target", target.model, n, n, n * prompt, n * prompt, n * max_gen)
    options = sum(len(q.options) for q in items) / max(len(items), 1)
    return Line("eval", "answer", "target", target.model, n, n * options, n * options * (prompt + 1),
                n * (prompt + options), 0.0)


def _tokens(tokens: Tokens, text: str) -> float:
    return float(tokens.count([text])[0]) if text else 0.0
