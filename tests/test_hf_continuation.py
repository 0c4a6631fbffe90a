"""``--model hf-continuation``: lm-eval's ``hf`` scores with logits of the continuation positions only, and its
log-likelihoods are lm-eval's own (Gemma-3-270M, real MedQA questions)."""

from __future__ import annotations

import math

import pytest


@pytest.fixture(scope="module")
def lm(gemma_path):
    from medr2_hooks.lmeval.hf_continuation import ContinuationHFLM

    return ContinuationHFLM(pretrained=gemma_path, dtype="float32", device="cpu", batch_size=3)


def _requests(lm, n: int) -> list:
    from medr2_hooks import data

    out = []
    for record in data.pools("medqa_usmle").eval[:n]:
        context = f"Question: {record.question}\nAnswer:"
        for letter, text in sorted(record.options.items())[:3]:
            out.append(((context, f" {letter}. {text}"), *lm._encode_pair(context, f" {letter}. {text}")))
    return out


@pytest.mark.slow
def test_continuation_logits_give_lm_evals_own_loglikelihoods(lm, monkeypatch):
    from lm_eval.models.huggingface import HFLM

    requests = _requests(lm, 3)  # contexts of different lengths: batches of 3 are right-padded
    kept = []
    original = type(lm).logits_to_keep

    def spy(self, inps):
        keep = original(self, inps)
        kept.append((keep, inps.shape[1]))
        return keep

    monkeypatch.setattr(type(lm), "logits_to_keep", spy)
    ours = lm._loglikelihood_tokens(requests, disable_tqdm=True)
    kept_now, calls = list(kept), len(kept)
    stock = HFLM._loglikelihood_tokens(lm, requests, disable_tqdm=True)  # full-sequence logits, as ``hf``
    assert len(kept) == calls + len(kept_now)  # the stock pass found no request to match: full logits
    assert all(keep is None for keep, _ in kept[calls:])
    assert kept_now and all(keep is not None and keep < width for keep, width in kept_now)
    assert sum(keep for keep, _ in kept_now) < sum(width for _, width in kept_now) / 4
    assert len(ours) == len(stock) == len(requests)
    for (a, greedy_a), (b, greedy_b) in zip(ours, stock):
        assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-3) and greedy_a == greedy_b


def test_rows_that_match_no_request_get_full_logits():
    import torch

    from medr2_hooks.lmeval.hf_continuation import ContinuationHFLM

    lm = ContinuationHFLM.__new__(ContinuationHFLM)  # the matching needs no weights

    lm._needed = {5: {(1, 2, 3, 4, 5): 2}}
    try:
        assert lm.logits_to_keep(torch.tensor([[1, 2, 3, 4, 5]])) == 2
        assert lm.logits_to_keep(torch.tensor([[1, 2, 3, 0, 0]])) is None
        lm._needed = {3: {(1, 2, 3): 2}, 5: {(1, 2, 3, 4, 5): 1}}
        # the shorter row is right-padded by 2: its continuation ends 2 positions before the batch's end
        assert lm.logits_to_keep(torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 0, 0]])) == 4
    finally:
        lm._needed = {}
    assert lm.logits_to_keep(torch.tensor([[1, 2, 3, 4, 5]])) is None


def test_medr2_eval_scores_embedded_models_with_continuation_logits():
    from medr2_hooks.llm.embedded import resolve
    from medr2_hooks.lmeval.runner import resolve_model

    assert resolve_model("embedded:gemma-270m", "") == (
        "hf-continuation", {"pretrained": resolve("embedded:gemma-270m"), "dtype": "float32"})
    assert resolve_model("hf", "pretrained=embedded:gemma-270m")[0] == "hf"  # a model the user names stays his
