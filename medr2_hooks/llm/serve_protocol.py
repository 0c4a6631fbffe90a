"""What ``medr2 serve`` accepts and computes: the OpenAI completions and chat-completions requests that vLLM's
server answers for lm-eval's API models (``local-completions``, ``local-chat-completions``) and our own backend,
validated into typed requests, and their greedy answers with log-probabilities.

Every field a request may carry is listed here; a value this server cannot honour (``n: 5``, ``temperature: 0.7``,
``stream: true``, a field it does not know) is a :class:`BadRequest` (HTTP 400), never ignored. Prompts are text
(tokenised with the model's special tokens, as vLLM does) or token ids (used as given). ``echo`` returns the
prompt's tokens with their log-probabilities (the first token has none) before the generated ones; ``logprobs: N``
adds each position's N most likely tokens (``top_logprobs``; the chosen token is always among them, as in vLLM).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_LOGPROBS = 20
# up to this many generated tokens, their log-probabilities come from the generation's own logits (one pass)
GENERATION_LOGITS_MAX = 16
# sequence positions whose full-vocabulary log-probabilities are held at once (Gemma-3: 262k entries each)
LOGIT_CHUNK = 256


class BadRequest(ValueError):
    """A client mistake: answered with HTTP 400 and this message."""


@dataclass(frozen=True)
class Limits:
    max_tokens: int = 2048  # generated tokens per prompt
    max_prompts: int = 256  # prompts in one request
    max_prompt_tokens: int | None = None  # default: the model's context


@dataclass(frozen=True)
class Prompt:
    ids: tuple[int, ...]
    text: str | None = None  # as sent (a text prompt): echoed as given, with its tokens' character offsets
    offsets: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Request:
    """One validated request: its prompts, and how to answer them."""
    prompts: tuple[Prompt, ...]
    max_tokens: int
    stop: tuple[str, ...]
    echo: bool = False
    logprobs: int | None = None  # top-N per position; None: no logprobs in the answer
    chat: bool = False


_COMPLETION_FIELDS = {"model", "prompt", "max_tokens", "temperature", "top_p", "stop", "seed", "echo", "logprobs",
                      "n", "stream", "frequency_penalty", "presence_penalty", "user"}
_CHAT_FIELDS = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stop", "seed",
                "n", "stream", "frequency_penalty", "presence_penalty", "user", "logprobs", "top_logprobs"}


def _int(body: dict, key: str, low: int, high: int, default: int | None) -> int | None:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{key} must be a whole number, found {type(value).__name__}")
    if not low <= value <= high:
        raise BadRequest(f"{key} must be between {low} and {high}, found {value}")
    return value


def _only(body: dict, key: str, allowed: tuple, what: str) -> None:
    value = body.get(key)
    if value is not None and (isinstance(value, bool) != isinstance(allowed[0], bool) or value not in allowed):
        raise BadRequest(f"{key}: this server {what}; found {value!r}")


def _common(body: dict, fields: set[str], model_name: str) -> None:
    if not isinstance(body, dict):
        raise BadRequest(f"the body must be a JSON object, found {type(body).__name__}")
    unknown = sorted(set(body) - fields)
    if unknown:
        raise BadRequest(f"unsupported field {unknown[0]!r}; supported: {', '.join(sorted(fields))}")
    if body.get("model") not in (None, model_name):
        raise BadRequest(f"model {body['model']!r} is not served here; this server serves {model_name!r}")
    temperature = body.get("temperature", 0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature != 0:
        raise BadRequest(f"temperature: this server decodes greedily (temperature 0); found {temperature!r}")
    _only(body, "n", (1,), "answers one choice per prompt (n: 1)")
    _only(body, "stream", (False,), "does not stream")
    _only(body, "top_p", (1, 1.0), "decodes greedily (top_p: 1)")
    for key in ("frequency_penalty", "presence_penalty"):
        _only(body, key, (0, 0.0), "applies no penalties (0)")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BadRequest(f"seed must be a whole number, found {type(seed).__name__}")
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise BadRequest("user must be a string")


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items) or len(items) > 16:
        raise BadRequest("stop must be a non-empty string or a list of at most 16 of them")
    return tuple(items)


def parse_completion(body, model_name: str, tokenizer, limits: Limits, context: int) -> Request:
    _common(body, _COMPLETION_FIELDS, model_name)
    raw = body.get("prompt")
    if isinstance(raw, str) or (_is_ids(raw) and raw):  # one prompt: a text, or a flat list of token ids
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise BadRequest("prompt must be a non-empty string, a list of token ids, or a non-empty list of either")
    if len(raw) > limits.max_prompts:
        raise BadRequest(f"{len(raw)} prompts in one request; at most {limits.max_prompts}")
    prompts = []
    for i, p in enumerate(raw):
        if isinstance(p, str) and p:
            enc = tokenizer(p, return_offsets_mapping=True)  # the model's special tokens, as vLLM adds them
            prompts.append(Prompt(tuple(enc["input_ids"]), p, tuple(s for s, _ in enc["offset_mapping"])))
        elif _is_ids(p) and p and all(0 <= t < len(tokenizer) for t in p):
            prompts.append(Prompt(tuple(p)))
        else:
            raise BadRequest(f"prompt[{i}] must be a non-empty string or a non-empty list of token ids < "
                             f"{len(tokenizer)}")
    echo = body.get("echo", False)
    if not isinstance(echo, bool):
        raise BadRequest("echo must be true or false")
    max_tokens = _int(body, "max_tokens", 0 if echo else 1, limits.max_tokens, 16)
    logprobs = _int(body, "logprobs", 0, MAX_LOGPROBS, None)
    return _checked(Request(tuple(prompts), max_tokens, _stop(body), echo, logprobs), limits, context)


def parse_chat(body, model_name: str, tokenizer, limits: Limits, context: int) -> Request:
    _common(body, _CHAT_FIELDS, model_name)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and set(m) <= {"role", "content", "name"} and m.get("role") in
            ("system", "user", "assistant") and isinstance(m.get("content"), str) for m in messages):
        raise BadRequest("messages must be a non-empty list of {role: system|user|assistant, content: string}")
    if not tokenizer.chat_template:
        raise BadRequest("the served model has no chat template: use /v1/completions")
    if "max_tokens" in body and "max_completion_tokens" in body:
        raise BadRequest("give max_tokens or max_completion_tokens, not both")
    key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    max_tokens = _int(body, key, 1, limits.max_tokens, 16)
    logprobs = body.get("logprobs", False)
    if not isinstance(logprobs, bool):
        raise BadRequest("logprobs must be true or false")
    top = _int(body, "top_logprobs", 0, MAX_LOGPROBS, 0) if logprobs else None
    if not logprobs and body.get("top_logprobs") is not None:
        raise BadRequest("top_logprobs needs logprobs: true")
    text = tokenizer.apply_chat_template([{"role": m["role"], "content": m["content"]} for m in messages],
                                         add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]  # the template writes its own special tokens
    return _checked(Request((Prompt(tuple(ids)),), max_tokens, _stop(body), False, top, chat=True), limits, context)


def _is_ids(x) -> bool:
    return isinstance(x, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in x)


def _checked(req: Request, limits: Limits, context: int) -> Request:
    most = min(limits.max_prompt_tokens or context, context)
    for i, p in enumerate(req.prompts):
        if len(p.ids) + req.max_tokens > most:
            raise BadRequest(f"prompt {i} has {len(p.ids)} tokens; with max_tokens {req.max_tokens} that exceeds the "
                             f"{most} tokens this server takes")
    return req


# -- computing the answers ---------------------------------------------------------------------------------------
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
