"""What ``medr2 serve`` accepts: the OpenAI completions and chat-completions requests that vLLM's server answers for
lm-eval's API models (``local-completions``, ``local-chat-completions``) and our own backend, validated into typed
requests (their answers are computed in :mod:`.serve_inference`).

Every field a request may carry is listed here; a value this server cannot honour (``n: 5``, ``temperature: 0.7``,
``stream: true``, a field it does not know) is a :class:`BadRequest` (HTTP 400), never ignored. Prompts are text
(tokenised with the model's special tokens, as vLLM does) or token ids (used as given). ``echo`` returns the
prompt's tokens with their log-probabilities (the first token has none) before the generated ones; ``logprobs: N``
adds each position's N most likely tokens (``top_logprobs``; the chosen token is always among them, as in vLLM).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_LOGPROBS = 20


class BadRequest(ValueError):
    """A client mistake: answered with HTTP 400 and this message (``close``: and the connection closed, its body
    not read whole)."""

    def __init__(self, message: str, close: bool = False):
        super().__init__(message)
        self.close = close


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
