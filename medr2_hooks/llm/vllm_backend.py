"""vLLM backend (its own environment: ``make vllm-env`` on a CPU, ``pip install -e .[gpu]`` on a GPU machine).
Imported only when used.

On vLLM's CPU platform ``gpu_memory_utilization`` is the share of the *machine's* memory the engine reserves, and a
GPU run's 0.9 fails at start-up on any machine whose memory is partly in use; :func:`cpu_engine_args` replaces it
there (and only there) by a share that fits, and the change is recorded where the run is recorded."""

from __future__ import annotations

from .backend import Usage, cut_at_stop, menu_logprobs

CPU_MEMORY_SHARE = 0.15  # of the machine's memory, at most half of what is free: a CPU twin's small models


def on_cpu() -> bool:
    """Whether vLLM will run on its CPU platform (no CUDA device here)."""
    import torch

    return not torch.cuda.is_available()


def cpu_memory_share() -> float:
    """The memory share a CPU engine can take now: :data:`CPU_MEMORY_SHARE`, or half of the free memory's share."""
    import os

    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            free = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        free = total
    return round(min(CPU_MEMORY_SHARE, 0.5 * free / total), 3)


def cpu_engine_args(args: dict, default: float = 0.9) -> dict:
    """On the CPU platform, the engine's memory share set to what fits (whatever was given: a GPU config's 0.9
    means "most of a GPU", never most of the host); returns what was changed, ``{key: {"given", "used", "why"}}``,
    for the run record. Every other engine setting (``tensor_parallel_size``, ``enforce_eager``, ...) reaches vLLM as
    given. On a GPU nothing changes."""
    if not on_cpu():
        return {}
    given = float(args.get("gpu_memory_utilization", default))
    used = cpu_memory_share()
    args["gpu_memory_utilization"] = used
    return {"gpu_memory_utilization": {"given": given, "used": used, "why": "vLLM's CPU platform: the share of the "
                                       "machine's memory the engine reserves"}}


class VLLMBackend:
    """``top_logprobs``: how many next-token log-probabilities a closed-set menu reads (:meth:`next_token_logprobs`;
    the engine's ``max_logprobs`` is raised to it): enough to cover a 16-label menu's letters."""

    def __init__(self, model: str, dtype: str = "auto", tensor_parallel_size: int = 1, max_length: int | None = None,
                 gpu_memory_utilization: float = 0.9, top_logprobs: int = 32, **engine_args):
        from vllm import LLM  # noqa: PLC0415 - GPU-only dependency

        from .local import local_folder, weights_revision

        self.top_logprobs = top_logprobs
        engine_args["max_logprobs"] = max(engine_args.get("max_logprobs", 20), top_logprobs)
        folder = local_folder(model)  # a CPU twin's embedded model: its converted folder
        path = folder or model

        engine_args["gpu_memory_utilization"] = gpu_memory_utilization
        self.engine_changes = cpu_engine_args(engine_args)
        self.llm = LLM(model=path, dtype=dtype, tensor_parallel_size=tensor_parallel_size, max_model_len=max_length,
                       **engine_args)
        self.tokenizer = self.llm.get_tokenizer()
        # as the hf backend names it: a local folder by its content, a hub id by its revision
        revision = weights_revision(folder) if folder else \
            getattr(self.llm.llm_engine.model_config, "revision", None) or "main"
        self.model_id = f"{model}@{revision}"
        self.max_length = self.llm.llm_engine.model_config.max_model_len
        self.usage = Usage()

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(self.tokenizer.encode(t, add_special_tokens=False)) for t in texts]

    def truncate(self, text: str, max_tokens: int) -> str:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        return text if len(ids) <= max_tokens else self.tokenizer.decode(ids[:max_tokens])

    def chat(self, user: str, system: str | None = None) -> str:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        if not getattr(self.tokenizer, "chat_template", None):
            return f"{system}\n\n{user}" if system else user
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def generate(self, prompts: list[str], max_new_tokens: int, stop: list[str] | None = None,
                 role: str = "generate") -> list[str]:
        from vllm import SamplingParams

        outputs = self.llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop=stop),
                                    use_tqdm=False)
        texts = [cut_at_stop(o.outputs[0].text, stop) for o in outputs]
        self.usage.add(role, len(prompts), sum(len(o.prompt_token_ids) for o in outputs),
                       sum(len(o.outputs[0].token_ids) for o in outputs))
        return texts

    def next_token_logprobs(self, prompts: list[str], choices: list[str],
                            role: str = "score") -> list[list[float]] | None:
        """Each choice's log-probability as the next token, from one sequence per prompt (``max_tokens=1`` with the
        sampled position's top ``top_logprobs``: unlike prompt log-probabilities, this keeps the prefix cache, so a
        menu costs one prefill); None when a choice is several tokens (the caller scores it as a sequence). A label
        outside the top-k gets the k-th log-probability, an upper bound, counted in the usage."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        ids = [self.tokenizer.encode(c, add_special_tokens=False) for c in choices]
        if any(len(i) != 1 for i in ids):
            return None
        ctx = [self.tokenizer.encode(p)[-(self.max_length - 1):] for p in prompts]
        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=self.top_logprobs, detokenize=False)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=c) for c in ctx], params, use_tqdm=False)
        tops = [{tok: getattr(lp, "logprob", lp) for tok, lp in o.outputs[0].logprobs[0].items()} for o in outputs]
        self.usage.add(role, len(prompts), sum(map(len, ctx)), len(prompts))
        return menu_logprobs(tops, [{i[0]} for i in ids], self.usage)

    def score(self, prompts: list[str], continuations: list[str], role: str = "score") -> list[tuple[float, int]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        rows = []
        for p, c in zip(prompts, continuations):
            ctx = self.tokenizer.encode(p)
            cont = self.tokenizer.encode(c, add_special_tokens=False)
            # context tokens that fit beside the continuation + 1 new token
            keep = max(1, self.max_length - len(cont) - 1)
            rows.append((ctx[-keep:], cont))
        # As lm-eval's vLLM model scores: prompt_logprobs=1 returns, per prompt position, the actual token's
        # logprob (plus the top-1); the first position is None. Older vLLM returned floats, newer Logprob objects.
        params = SamplingParams(max_tokens=1, prompt_logprobs=1, temperature=0.0, detokenize=False)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=c + x) for c, x in rows], params, use_tqdm=False)
        out = []
        for (ctx, cont), o in zip(rows, outputs):
            lps = o.prompt_logprobs[len(ctx):]
            out.append((sum(getattr(lp[tok], "logprob", lp[tok]) for lp, tok in zip(lps, cont)), len(cont)))
        self.usage.add(role, len(prompts), sum(len(c) + len(x) for c, x in rows))
        return out
