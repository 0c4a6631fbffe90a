"""lm-eval's ``hf`` model with continuation-only logits: ``medr2 eval --model hf-continuation`` (registered by
:func:`medr2_hooks.lmeval.runner.register_models`; ``medr2 eval`` and ``medr2 sweep`` score embedded models with it).

lm-eval's ``hf`` model scores a (context, continuation) request by computing ``[batch, sequence, vocabulary]``
logits for every input position, then a log-softmax over all of them, and keeps only the continuation's few
positions. With long evidence-packed prompts that is the whole cost in memory: one 9,400-token prompt of
Gemma-3 (262,144-token vocabulary) makes ~10 GB of float32 logits and as much again for their log-softmax,
which a 24 GB machine cannot hold (Table 9's 16K window), and on a GPU it caps the batch at long windows.

This model computes the same numbers from the last ``K`` positions only (transformers' ``logits_to_keep``),
where ``K`` is the smallest count that still covers every row's continuation in the batch; lm-eval's own
continuation slicing (``ctx_len = inplen + logits.shape[0] - padding_len_inp``, made for positions that
are not in the logits) then picks exactly the positions it would have picked from the full logits. A batch
whose rows it cannot match to a request (lm-eval's batch-size probe) gets full logits, as ``hf`` does.
Everything else — batching, truncation, one-token-continuation caching, generation — is lm-eval's ``hf``.
"""

from __future__ import annotations

import functools
import inspect

import torch
from lm_eval.models.huggingface import HFLM


class ContinuationHFLM(HFLM):
    """``hf`` whose log-likelihood requests compute logits for the continuation positions only."""

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs: int | None = None):
        # the model input lm-eval builds for each request (left-truncated context + continuation, last token
        # dropped), by length: input tokens -> the longest continuation scored on them
        needed: dict[int, dict[tuple[int, ...], int]] = {}
        if self.backend == "causal":
            for _, context, continuation in requests:
                inp = tuple((context + continuation)[-(self.max_length + 1):][:-1])
                by_len = needed.setdefault(len(inp), {})
                by_len[inp] = max(by_len.get(inp, 0), len(continuation))
        self._needed = needed
        try:
            return super()._loglikelihood_tokens(requests, disable_tqdm=disable_tqdm, override_bs=override_bs)
        finally:
            self._needed = {}

    def logits_to_keep(self, inps: torch.Tensor) -> int | None:
        """Positions at the end of the right-padded batch ``inps`` that hold every row's continuation
        (None: a row matches no pending request, keep them all)."""
        needed = getattr(self, "_needed", None)
        if not needed:
            return None
        width = inps.shape[1]
        keep = 0
        for row in inps.tolist():
            match = None
            # lm-eval pads rows on the right with zeros: the row's own length lies within its trailing zeros
            zeros = len(row) - len(_rstrip(row, 0))
            for length in range(width, width - zeros - 1, -1):
                contlen = needed.get(length, {}).get(tuple(row[:length]))
                if contlen is not None:
                    match = width - length + contlen
                    break
            if match is None:
                return None
            keep = max(keep, match)
        return keep

    def _model_call(self, inps: torch.Tensor, attn_mask: torch.Tensor | None = None,
                    labels: torch.Tensor | None = None) -> torch.Tensor:
        keep = self.logits_to_keep(inps) if attn_mask is None and labels is None else None
        if keep is None or keep >= inps.shape[1] or not _accepts_logits_to_keep(type(self.model)):
            return super()._model_call(inps, attn_mask=attn_mask, labels=labels)
        with torch.no_grad(), torch.autocast(device_type=self.device.type, dtype=self.mixed_precision_dtype,
                                             enabled=self.mixed_precision_dtype is not None):
            return self.model(inps, logits_to_keep=keep).logits


def _rstrip(row: list[int], value: int) -> list[int]:
    end = len(row)
    while end and row[end - 1] == value:
        end -= 1
    return row[:end]


@functools.cache
def _accepts_logits_to_keep(model_class: type) -> bool:
    """Whether this transformers model class's forward takes ``logits_to_keep`` (asked once per class)."""
    return "logits_to_keep" in inspect.signature(model_class.forward).parameters
