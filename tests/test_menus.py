"""Issue 41: one prefill per closed-set decision on served backends. A menu whose labels are one token each is read
from one request's next-token distribution (``max_tokens: 1`` with ``top_logprobs``), not as one prompt-logprob
sequence per label, which a vLLM server computes without its prefix cache. Checked on `medr2 serve` with
SmolLM2-135M-Instruct against the per-label path, on real textbook passages."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_menus import PerLabel, passages  # noqa: E402  (the bench's passages and its per-label path)

pytestmark = pytest.mark.slow

SMOL = "embedded:smollm2-135m-instruct"
# real passages per stage: 6 in CI; MEDR2_MENU_DOCUMENTS=64 runs the full equivalence check (~20 min)
DOCUMENTS = int(os.environ.get("MEDR2_MENU_DOCUMENTS", "6"))


@pytest.fixture(scope="module")
def served():
    from medr2_hooks.llm.hf import HFBackend
    from medr2_hooks.llm.serve import start_background

    httpd, url = start_background(HFBackend(SMOL, batch_size=8), "smol")
    yield url
    httpd.shutdown()
    httpd.server_close()


def test_one_request_per_menu_gives_the_per_label_distributions_and_decisions(served):
    from medr2_hooks.llm.closed_set import choice_distribution, label_distribution
    from medr2_hooks.llm.openai_backend import OpenAIBackend
    from medr2_hooks.rerank.fine import DOC_TYPES, EVIDENCE_LEVELS, doc_type_prompt, level_prompt

    docs = passages(DOCUMENTS, 60)
    for name, render, labels in (("leveler", level_prompt, list(EVIDENCE_LEVELS)),
                                 ("doc_typer", doc_type_prompt, list(DOC_TYPES))):
        one, each = (OpenAIBackend("smol", base_url=served, tokenizer=SMOL, request_batch=8) for _ in range(2))
        prompts = [one.chat(render(d)) for d in docs]
        fast = choice_distribution(one, prompts, labels, name)
        slow = choice_distribution(PerLabel(each), prompts, labels, name)
        assert one.usage.prompts == len(prompts) and each.usage.prompts == len(prompts) * len(labels)
        bounded = _bounded(one, prompts, labels)
        exact = [i for i in range(len(prompts)) if i not in bounded]
        assert len(exact) >= len(prompts) // 2, f"{name}: most menus fit the top 20"
        assert np.abs(fast[exact] - slow[exact]).max() <= 1e-4
        assert (fast.argmax(1) == slow.argmax(1)).all()  # the same decisions, bounded menus included
        print(f"{name}: requests {each.usage.prompts} -> {len(prompts)}, {len(exact)}/{len(prompts)} menus with "
              "every label in the top 20")
    # yes/no judges (relevance, usefulness, conflict, LLM-AMT's filters): words of one token each
    one, each = (OpenAIBackend("smol", base_url=served, tokenizer=SMOL) for _ in range(2))
    judged = [one.chat(f"Document: {d}\n\nIs this document about the heart? Answer yes or no.") for d in docs[:8]]
    fast, slow = (label_distribution(b, judged, ["yes", "no"], "relevance") for b in (one, PerLabel(each)))
    assert one.usage.prompts == len(judged) and each.usage.prompts == 2 * len(judged)
    exact = [i for i in range(len(judged)) if i not in _bounded(one, judged, ["yes", "no"], words=True)]
    assert exact and np.abs(fast[exact] - slow[exact]).max() <= 1e-4
    assert (fast.argmax(1) == slow.argmax(1)).all()


def _bounded(backend, prompts: list[str], labels: list[str], words: bool = False) -> set[int]:
    """The menus some of whose letters (``words``: the labels themselves) the server's top 20 did not return (read
    again, one by one)."""
    from medr2_hooks.llm.closed_set import LETTERS

    shown = labels if words else list(LETTERS[: len(labels)])
    out = set()
    for i, p in enumerate(prompts):
        before = backend.usage.menus_with_a_bound
        sep = "" if p[-1:].isspace() else " "  # as closed_set reads a label after a chat template's header
        backend.next_token_logprobs([p], [f"{sep}{x}" for x in shown], role="check")
        if backend.usage.menus_with_a_bound > before:
            out.add(i)
    return out


def test_a_label_of_several_tokens_keeps_the_per_label_path(served):
    from medr2_hooks.llm.openai_backend import OpenAIBackend

    client = OpenAIBackend("smol", base_url=served, tokenizer=SMOL)
    assert client.next_token_logprobs(["Kind:"], [" randomized controlled trial", " case report"]) is None
