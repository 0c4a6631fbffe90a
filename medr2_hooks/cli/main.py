"""``medr2`` — Med-R² harness command line.

Sub-commands import their heavy dependencies only when run, so ``medr2 --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

from ..errors import Medr2Error
from ..flags import Parser
from .output import json_stdout

# name -> (module, one-line help). Each module defines add_arguments(parser) and run(args) -> int.
COMMANDS = {
    "benchmark": ("medr2_hooks.cli.benchmark_cmd",
                  "add, list, show or remove a benchmark declared in YAML (no Python)"),
    "data": ("medr2_hooks.cli.data_cmd", "inspect the benchmark data (counts, sources)"),
    "eval": ("medr2_hooks.cli.eval_cmd", "run lm-eval on medr2 tasks, save results and an offline W&B run"),
    "evidence": ("medr2_hooks.cli.evidence_cmd", "score each stage's documents against gold evidence "
                                                 "(recall, nDCG, RR)"),
    "finetune": ("medr2_hooks.cli.finetune_cmd", "full-parameter fine-tuning baseline (accelerate), resumable"),
    "judge": ("medr2_hooks.cli.judge_cmd", "grade a RareArena run's diagnoses with an LLM judge, as its authors do"),
    "index": ("medr2_hooks.cli.index_cmd", "build, inspect and search evidence indexes"),
    "models": ("medr2_hooks.cli.models_cmd", "resolve embedded model names to local folders"),
    "prepare": ("medr2_hooks.cli.prepare_cmd", "run retrieval tasks' pre-pass before evaluation (sharded, Ray)"),
    "rescore": ("medr2_hooks.cli.rescore_cmd", "read recorded replies again with the tasks' answer readers (no "
                                               "model): strict, flexible and MIRAGE's rule"),
    "report": ("medr2_hooks.cli.report_cmd",
               "render an experiment's results: paper-layout tables, statistics, figures"),
    "serve": ("medr2_hooks.cli.serve_cmd", "OpenAI-compatible completions server over a local model (vllm "
                                           "serve stand-in)"),
    "sweep": ("medr2_hooks.cli.sweep_cmd", "expand an experiment config into runs and execute them (resumable)"),
    "tasks": ("medr2_hooks.cli.tasks_cmd", "list the lm-eval tasks and groups this package ships"),
    "wrap": ("medr2_hooks.cli.wrap_cmd", "Med-R² around an lm-eval built-in multiple-choice task (keeps its prompt)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="medr2",
        description="Med-R² evidence-based-medicine RAG evaluation harness (lm-evaluation-harness tasks).",
        epilog="Settings: MEDR2_DATA_DIR (benchmark files, default ../shared/data), MEDR2_CACHE_DIR "
        "(models, indexes, stage caches, default ~/.cache/medr2), MEDR2_RESULTS_DIR (default ./results), "
        "MEDR2_CONFIG_DIR (your declared benchmarks and wrapped tasks, default ~/.config/medr2), "
        "WANDB_MODE (default offline). Flags use underscores, as lm-eval's (--batch_size); hyphenated spellings "
        "(--batch-size) are accepted too.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        import_module(module).add_arguments(cmd)
        cmd.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with json_stdout(args):
            return import_module(args._module).run(args) or 0
    except Medr2Error as exc:
        print(f"medr2 {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: what is computed is in the stage cache; nothing half-written stays
        print(f"medr2 {args.command}: interrupted: a re-run resumes from what is cached", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`medr2 tasks | head`): stop quietly, as Unix tools do
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141


if __name__ == "__main__":
    sys.exit(main())
