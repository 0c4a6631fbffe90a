"""A leveler-shaped closed-set stage (64 passages, 9-label evidence menu; ``--typer``: the 16-label document-type
menu) read both ways on a served backend: one request per menu (the next token's ``top_logprobs``) and one
prompt-logprob sequence per label (what served menus cost before), beside one bare prefill of the same prompts
(``max_tokens: 1``, no log-probabilities). Prints requests, prompt tokens the server computed, wall time and the
ratio of each to the bare prefill (the three take turns round after round, bench/timing.py: the median ratio with its
min-max).

    python bench/bench_menus.py                                   # medr2 serve, SmolLM2-135M-Instruct, in process
    python bench/bench_menus.py --base_url http://localhost:8001/v1 --model Qwen/Qwen2.5-72B-Instruct \\
        --tokenizer Qwen/Qwen2.5-72B-Instruct                     # your vllm serve (GPUs)

On vLLM the per-label rows are computed without the prefix cache (requests that ask for prompt log-probabilities
skip it): that is where the one-request path saves its 9x/16x; on ``medr2 serve`` (no prefix cache at all) both
compute every row, so the CPU numbers show the request count and the wall time of the rows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import interleaved, median_seconds, ratio, shown  # noqa: E402


class PerLabel:
    """A backend without the next-token path: every label its own scored sequence (the path before)."""

    def __init__(self, inner):
        self.inner, self.usage = inner, inner.usage

    def score(self, *args, **kwargs):
        return self.inner.score(*args, **kwargs)

    def count_tokens(self, texts):
        return self.inner.count_tokens(texts)


def passages(n: int, words: int) -> list[str]:
    import numpy as np

    from medr2_hooks.corpus.store import CorpusStore
    from medr2_hooks.retrieve.build import ensure_index

    store = CorpusStore(ensure_index("textbooks_demo", log=lambda *_: None) / "corpus")
    try:
        pids = np.linspace(0, len(store.passages) - 1, n).astype(int).tolist()
        return [" ".join(t.split()[:words]) for t in store.passage_texts(pids)]
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base_url", help="an OpenAI-compatible server (default: medr2 serve started here)")
    parser.add_argument("--model", default="embedded:smollm2-135m-instruct")
    parser.add_argument("--tokenizer", default=None, help="the served model's tokenizer (default: --model)")
    parser.add_argument("--documents", type=int, default=64)
    parser.add_argument("--words", type=int, default=120, help="words of each passage in the prompt")
    parser.add_argument("--typer", action="store_true", help="the 16-label document-type menu")
    parser.add_argument("--rounds", type=int, default=3, help="rounds at least (each side runs >= 1 s in all)")
    args = parser.parse_args()

    from medr2_hooks.llm.closed_set import choice_distribution
    from medr2_hooks.llm.openai_backend import OpenAIBackend
    from medr2_hooks.rerank.fine import DOC_TYPES, EVIDENCE_LEVELS, doc_type_prompt, level_prompt

    server = None
    url = args.base_url
    if url is None:
        from medr2_hooks.llm.hf import HFBackend
        from medr2_hooks.llm.serve import start_background

        server, url = start_background(HFBackend(args.model, batch_size=8), args.model)
    render, labels = (doc_type_prompt, list(DOC_TYPES)) if args.typer else (level_prompt, list(EVIDENCE_LEVELS))
    client = lambda: OpenAIBackend(args.model, base_url=url, tokenizer=args.tokenizer or args.model)  # noqa: E731
    docs = passages(args.documents, args.words)
    prompts = [client().chat(render(d)) for d in docs]
    bare, per_menu, per_label = client(), client(), client()
    times = interleaved({
        "one bare prefill": lambda: bare.generate(prompts, max_new_tokens=1, role="prefill"),
        "one request per menu": lambda: choice_distribution(per_menu, prompts, labels, "leveler"),
        "one row per label": lambda: choice_distribution(PerLabel(per_label), prompts, labels, "leveler")},
        min_rounds=args.rounds)
    rows = dict(zip(times, (bare.usage, per_menu.usage, per_label.usage)))
    rounds = len(times["one bare prefill"])
    base_tokens = rows["one bare prefill"].prompt_tokens
    print(f"{len(prompts)} menus of {len(labels)} labels on {url} ({args.model}), {rounds} rounds\n")
    print("| path | requests | prompt tokens computed | wall s (median) | tokens / bare | time / bare |\n"
          "|---|---|---|---|---|---|")
    for name, usage in rows.items():
        print(f"| {name} | {usage.prompts // rounds} | {usage.prompt_tokens // rounds} | "
              f"{median_seconds(times, name):.1f} | {usage.prompt_tokens / base_tokens:.2f}x | "
              f"{shown(ratio(times, name, 'one bare prefill'))} |")
    if server is not None:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
