"""How ``medr2 serve`` computes the answer to a validated :class:`~.serve_protocol.Request`: greedy generation
with the backend's model, stop strings and end-of-turn tokens cut as vLLM cuts them, and log-probabilities (echoed
prompt tokens, top-N per position) read from the output head a chunk of positions at a time."""

from __future__ import annotations

import torch

from .serve_protocol import Prompt, Request

# up to this many generated tokens, their log-probabilities come from the generation's own logits (one pass)
GENERATION_LOGITS_MAX = 16
# sequence positions whose full-vocabulary log-probabilities are held at once (Gemma-3: 262k entries each)
LOGIT_CHUNK = 256


def _head(model, hidden: torch.Tensor) -> torch.Tensor:
    """The output head over ``hidden`` (the model's final soft-capping included), in float32."""
    logits = model.get_output_embeddings()(hidden).float()
    cap = getattr(model.config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


@torch.no_grad()
def sequence_logprobs(backend, seqs: list[list[int]], top_n: int, should_stop=lambda: False) -> list[dict]:
    """For each token sequence: every token's log-probability given the ones before it (None for the first), its
    ``top_n`` most likely tokens at each position, and its rank-0 choice. The output head runs
    :data:`LOGIT_CHUNK` positions at a time, so no ``[batch, sequence, vocabulary]`` tensor is ever whole."""
    from .hf import pad

    model, tok = backend.model, backend.tokenizer
    out: list[dict] = [{} for _ in seqs]
    for idx in backend._batches(len(seqs), [len(s) for s in seqs]):
        if should_stop():
            break
        ids, mask, positions = pad([seqs[i] for i in idx], tok.pad_token_id, left=True)
        hidden = model.get_decoder()(input_ids=ids.to(backend.device), attention_mask=mask.to(backend.device),
                                     position_ids=positions.to(backend.device)).last_hidden_state
        width = ids.shape[1]
        for j, i in enumerate(idx):
            seq = seqs[i]
            start = width - len(seq)
            picked, tops = [None], [None]
            for c0 in range(start, width - 1, LOGIT_CHUNK):
                c1 = min(c0 + LOGIT_CHUNK, width - 1)
                lp = _head(model, hidden[j, c0:c1]).log_softmax(-1)  # position t predicts token t + 1
                targets = torch.tensor(seq[c0 - start + 1: c1 - start + 1], device=lp.device)
                picked += lp.gather(1, targets[:, None])[:, 0].tolist()
                if top_n:
                    values, index = lp.topk(top_n, dim=-1)
                    tops += [(v, x) for v, x in zip(values.tolist(), index.tolist())]
                else:
                    tops += [([], [])] * (c1 - c0)
            out[i] = {"token_logprobs": picked, "top": tops}
    return out


def top_dict(tokenizer, top: tuple | None, token: int, logprob: float | None) -> dict | None:
    """vLLM's ``top_logprobs`` entry of one position: the N most likely tokens, and the chosen one."""
    if top is None:
        return None
    values, index = top
    found = {tokenizer.convert_ids_to_tokens(int(x)): float(v) for v, x in zip(values, index)}
    found.setdefault(tokenizer.convert_ids_to_tokens(int(token)), float(logprob))
    return found


def eos_ids(backend) -> set[int]:
    """The tokens that end a generation: the tokenizer's end-of-sequence and the model's generation config's."""
    found = getattr(backend.model.generation_config, "eos_token_id", None)
    found = found if isinstance(found, list) else [found]
    return {t for t in [backend.tokenizer.eos_token_id, *found] if isinstance(t, int)}


def cut(tokenizer, new: list[int], stop: tuple[str, ...], eos: set[int]) -> tuple[list[int], str, str]:
    """The generated tokens kept, their text and the finish reason: generation ends at an end-of-sequence token
    (not kept) or at the first stop string (the text ends before it; the tokens end with the one that completed
    it), else at the token limit."""
    kept: list[int] = []
    for t in new:
        if t in eos:
            return kept, tokenizer.decode(kept, skip_special_tokens=True), "stop"
        kept.append(t)
        if stop:
            text = tokenizer.decode(kept, skip_special_tokens=True)
            at = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
            if at >= 0:
                return kept, text[:at], "stop"
    return kept, tokenizer.decode(kept, skip_special_tokens=True), "length"


@torch.no_grad()
def greedy(backend, prompts: list[tuple[int, ...]], max_tokens: int, should_stop=lambda: False,
           top_n: int | None = None) -> tuple[list[list[int]], list[dict] | None]:
    """Greedy continuations of token-id prompts (``max_tokens`` each, end-of-sequence included), in batches; stops
    early once ``should_stop()`` (every client of the batch went away). With ``top_n``, also each generated
    position's log-probabilities from the generation's own logits (``{"token_logprobs", "top"}`` per prompt, as
    :func:`sequence_logprobs` gives them for those positions): a closed-set menu's ``max_tokens: 1`` request then
    costs one forward pass, as on vLLM."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    from .hf import pad

    class Cancelled(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), bool(should_stop()), dtype=torch.bool, device=input_ids.device)

    tok = backend.tokenizer
    out: list[list[int]] = [[] for _ in prompts]
    scored: list[dict] | None = [{} for _ in prompts] if top_n is not None else None
    if max_tokens == 0:
        return out, scored
    for idx in backend._batches(len(prompts), [len(p) for p in prompts]):
        if should_stop():
            break
        ids, mask, _ = pad([list(prompts[i]) for i in idx], tok.pad_token_id, left=True)
        gen = backend.model.generate(input_ids=ids.to(backend.device), attention_mask=mask.to(backend.device),
                                     max_new_tokens=max_tokens, do_sample=False, pad_token_id=tok.pad_token_id,
                                     stopping_criteria=StoppingCriteriaList([Cancelled()]),
                                     return_dict_in_generate=True, output_logits=top_n is not None)
        for j, i in enumerate(idx):
            out[i] = gen.sequences[j, ids.shape[1]:].tolist()
            if scored is not None:
                lps = [step[j].float().log_softmax(-1) for step in gen.logits]
                picked = [float(lp[t]) for lp, t in zip(lps, out[i])]
                tops = [tuple(x.tolist() for x in lp.topk(top_n)) if top_n else ([], []) for lp in lps]
                scored[i] = {"token_logprobs": picked, "top": tops}
    return out, scored


def _text_and_offsets(tok, prompt: Prompt, echo: bool, kept: list[int], text: str) -> tuple[str, list[int]]:
    """The choice's text (the prompt as sent, then the generated text) and each shown token's character offset."""
    head = (prompt.text if prompt.text is not None else tok.decode(list(prompt.ids))) if echo else ""
    offsets = []
    if echo:
        offsets = list(prompt.offsets) if prompt.offsets is not None else \
            [len(tok.decode(list(prompt.ids[:k]))) for k in range(len(prompt.ids))]
    offsets += [len(head) + len(tok.decode(kept[:k], skip_special_tokens=True)) for k in range(len(kept))]
    return head + text, offsets


def answer(backend, req: Request, should_stop=lambda: False) -> tuple[list[dict], list[int]]:
    """The choices of one request (completions or chat), greedy, with log-probabilities where asked, and the number
    of tokens generated for each prompt."""
    tok = backend.tokenizer
    want = req.logprobs is not None
    # the generated positions' log-probabilities come with the generation itself when only they are asked for and
    # the answer is short (a menu's max_tokens: 1); an echo needs the prompt's positions too (a second pass)
    from_generation = want and not req.echo and req.max_tokens <= GENERATION_LOGITS_MAX
    new, generated = greedy(backend, [p.ids for p in req.prompts], req.max_tokens, should_stop,
                            (req.logprobs or 0) if from_generation else None)
    eos = eos_ids(backend)
    kept = [cut(tok, n, req.stop, eos) for n in new]
    if from_generation:  # positions of the prompt carry nothing (never shown without echo)
        # an answer that ended at once (its first token the end of sequence) still shows that position's
        # distribution, as vLLM returns the end token with its log-probabilities: a menu needs it
        kept = [(n[:1], t, r) if not k and n[:1] and n[0] in eos else (k, t, r) for n, (k, t, r) in zip(new, kept)]
        scored = [{"token_logprobs": [None] * len(p.ids) + g.get("token_logprobs", [])[:len(k)],
                   "top": [None] * len(p.ids) + g.get("top", [])[:len(k)]}
                  for p, g, (k, _, _) in zip(req.prompts, generated, kept)]
    elif want:
        scored = sequence_logprobs(backend, [list(p.ids) + k for p, (k, _, _) in zip(req.prompts, kept)],
                                   req.logprobs or 0, should_stop)
    else:
        scored = [None] * len(kept)
    choices = []
    for i, (prompt, (tokens, text, reason), lp) in enumerate(zip(req.prompts, kept, scored)):
        n = len(prompt.ids)
        if req.chat:
            choice = {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": reason}
            if want:
                choice["logprobs"] = {"content": [
                    {"token": tok.convert_ids_to_tokens(t), "logprob": lp["token_logprobs"][n + k],
                     "top_logprobs": [{"token": name, "logprob": v} for name, v in
                                      top_dict(tok, lp["top"][n + k], t, lp["token_logprobs"][n + k]).items()]}
                    for k, t in enumerate(tokens)]}
            choices.append(choice)
            continue
        shown = list(prompt.ids) + tokens if req.echo else tokens
        full_text, offsets = _text_and_offsets(tok, prompt, req.echo, tokens, text)
        choice = {"index": i, "text": full_text, "finish_reason": reason, "logprobs": None}
        if want:
            first = 0 if req.echo else n
            logprobs = lp["token_logprobs"][first:]
            choice["logprobs"] = {
                "tokens": tok.convert_ids_to_tokens(shown), "token_logprobs": logprobs,
                "top_logprobs": [top_dict(tok, top, t, v) if v is not None else None
                                 for top, t, v in zip(lp["top"][first:], shown, logprobs)],
                "text_offset": offsets}
        choices.append(choice)
    return choices, [len(k) for k, _, _ in kept]
