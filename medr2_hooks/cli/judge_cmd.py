"""``medr2 judge``: grade a finished RareArena run's diagnosis lists with an LLM judge (RareArena's 0/1/2 scale)."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = ("A run can also be graded as it runs: --metadata '{\"judge\": {\"backend\": \"openai\", \"api\": "
                     "\"chat\", \"model\": \"gpt-4o\"}}' (or an experiment's judge:) adds the judge filter's "
                     "top1,judge / top5,judge beside the offline top5,orphanet.\n\nexample:\n"
                     "  OPENAI_API_KEY=... medr2 judge results/runs/<run> --backend openai --api chat --model gpt-4o\n"
                     "Writes <run>/judged.json (top1/top5, lenient = RareArena's total recall, unparseable replies).")
    parser.add_argument("run_dir", help="a run folder holding samples_rarearena_*.jsonl")
    parser.add_argument("--backend", default="openai", help="openai (default), hf or vllm")
    parser.add_argument("--model", default="gpt-4o", help="judge model (default gpt-4o, RareArena's judge)")
    parser.add_argument("--api", choices=("chat", "completions"), default="chat",
                        help="openai backend: chat completions (default; GPT-4o has no completions endpoint) or "
                             "completions (a vllm serve endpoint)")
    parser.add_argument("--base_url", "--base-url", help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL)")


def run(args: argparse.Namespace) -> int:
    from ..lmeval.judge import Judge, judge_run

    spec = {"backend": args.backend, "model": args.model}
    if args.backend == "openai":
        spec["api"] = args.api
        if args.base_url:
            spec["base_url"] = args.base_url
    print(json.dumps(judge_run(args.run_dir, Judge.from_spec(spec)), indent=1))
    return 0
