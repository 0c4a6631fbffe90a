"""``medr2 judge``: re-grade a RareArena run's diagnoses with an LLM judge (0/1/2, RareArena's scale)."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = ("example:\n  OPENAI_API_KEY=... medr2 judge results/runs/<run> --backend openai --model gpt-4o\n"
                     "Writes <run>/judged.json (top1/top5 and lenient recall by the judge, unparseable replies).")
    parser.add_argument("run_dir", help="a run folder holding samples_rarearena_*.jsonl")
    parser.add_argument("--backend", default="openai", help="openai (default), hf or vllm")
    parser.add_argument("--model", default="gpt-4o", help="judge model (default gpt-4o)")
    parser.add_argument("--base_url", help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL)")


def run(args: argparse.Namespace) -> int:
    from ..lmeval.judge import judge_run
    from ..llm import BackendPool

    spec = {"backend": args.backend, "model": args.model}
    if args.base_url:
        spec["base_url"] = args.base_url
    print(json.dumps(judge_run(args.run_dir, BackendPool().get(spec)), indent=1))
    return 0
