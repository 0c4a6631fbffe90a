"""A role stage against a served model: requests in flight one at a time vs several at once.

    python bench/bench_served.py [--model embedded:gemma-270m] [--pairs 64] [--concurrency 1 4] [--json]

Starts ``medr2 serve`` (the local OpenAI-compatible server; ``vllm serve`` speaks the same protocol) in a
subprocess, then runs the coarse-rerank LLM judge (yes/no closed-set scoring, the stage with the most calls in
a Med-R² pre-pass) over ``--pairs`` (question, passage) pairs of MedQA-USMLE questions and demo-index passages
through :class:`OpenAIBackend` with each ``--concurrency``, ``--request-batch`` prompts per request, the settings
taking turns round after round (bench/timing.py). Prints median seconds, prompt tokens/s and the ratio of the first
concurrency's time to each (median, min-max: above 1, the setting is faster); the scores must agree across settings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import interleaved, median_seconds, ratio, shown  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded:gemma-270m")
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--request-batch", type=int, default=4)
    parser.add_argument("--server-batch", type=int, default=8, help="the server's prompts per forward pass")
    parser.add_argument("--max-doc-tokens", type=int, default=128)
    parser.add_argument("--port", type=int, default=18301)
    parser.add_argument("--rounds", type=int, default=3, help="rounds at least (each setting runs >= 1 s in all)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from medr2_hooks import data
    from medr2_hooks.corpus.store import CorpusStore
    from medr2_hooks.llm.openai_backend import OpenAIBackend
    from medr2_hooks.rerank.coarse import LLMReranker
    from medr2_hooks.retrieve.build import ensure_index

    store = CorpusStore(ensure_index("textbooks_demo", log=lambda *_: None) / "corpus")
    questions = [r.question for r in data.pools("medqa_usmle").eval[:8]]
    passages = store.passage_texts(range(0, 8 * 37, 37))
    pairs = [(q, p) for q in questions for p in passages][: args.pairs]

    from medr2_hooks.llm.embedded import resolve
    from medr2_hooks.llm.serve import serve_process

    judges, scores = {}, {}
    with serve_process(args.model, args.port, name="served", batch_size=args.server_batch) as url:
        for c in args.concurrency:
            backend = OpenAIBackend("served", base_url=url, tokenizer=resolve(args.model), concurrency=c,
                                    request_batch=args.request_batch)
            judges[c] = LLMReranker(backend, args.max_doc_tokens)
            judges[c].score(pairs[: args.request_batch])  # warm-up
            backend.usage = type(backend.usage)()

        def run(c):
            return lambda: scores.__setitem__(c, judges[c].score(pairs))

        times = interleaved({c: run(c) for c in args.concurrency}, min_rounds=args.rounds)
    first, reference = args.concurrency[0], scores[args.concurrency[0]]
    rows = []
    for c in args.concurrency:
        seconds = median_seconds(times, c)
        tokens = judges[c].backend.usage.to_json()["prompt_tokens"] // len(times[c])
        rows.append({"concurrency": c, "seconds": round(seconds, 2), "prompt_tokens": tokens,
                     "tokens_per_s": round(tokens / seconds, 1), "speedup": ratio(times, first, c),
                     "max_score_diff_vs_first": max(abs(a - b) for a, b in zip(scores[c], reference))})
    report = {"model": args.model, "pairs": len(pairs), "request_batch": args.request_batch,
              "server_batch": args.server_batch, "runs": rows}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"coarse-rerank judge over {len(pairs)} pairs, {args.model} served by medr2 serve "
          f"({args.request_batch} prompts a request, server batch {args.server_batch})")
    for row in rows:
        print(f"  concurrency {row['concurrency']:>2}: {row['seconds']:>7.2f} s  {row['tokens_per_s']:>8.1f} "
              "prompt tok/s  "
              f"{shown(row['speedup'])} faster than {first}  (max |score diff| "
              f"{row['max_score_diff_vs_first']:.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
