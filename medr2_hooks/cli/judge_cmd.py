"""``medr2 judge``: grade a finished RareArena run's diagnosis lists with an LLM judge (RareArena's 0/1/2 scale)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


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
    from ..lmeval.judge_client import Judge

    spec = {"backend": args.backend, "model": args.model}
    if args.backend == "openai":
        spec["api"] = args.api
        if args.base_url:
            spec["base_url"] = args.base_url
    cases = read_cases(Path(args.run_dir))  # a damaged samples file is refused before the judge loads
    print(json.dumps(judge_run(args.run_dir, Judge.from_spec(spec), cases), indent=1))
    return 0


def read_cases(run_dir: Path) -> dict:
    """The judge's cases of each RareArena task logged in ``run_dir``: ``{task: [Case]}``; a damaged samples row is a
    one-line error naming its file and line."""
    from ..data.readers import iter_jsonl
    from ..data.replies import samples_under, task_of
    from ..errors import DataError, RowError
    from ..lmeval.judge_client import Case

    files = [p for p in samples_under(Path(run_dir))[0] if task_of(p).startswith("rarearena_")]
    if not files:
        raise DataError(f"{run_dir}: no samples_rarearena_*.jsonl (run a rarearena task with --log_samples)")
    tasks: dict[str, list] = {}
    for path in files:
        for lineno, row in iter_jsonl(path):
            if row.get("filter", "orphanet") not in ("orphanet", "none"):
                continue  # the same response under the judge filter
            got = row.get("filtered_resps")
            response = got[0] if isinstance(got, list) and got else got
            if not isinstance(response, str):
                raise RowError(path, lineno, "filtered_resps", f"expected the reply's text, found {response!r:.80}")
            try:
                case = Case.from_doc(row.get("doc"), response)
            except (TypeError, KeyError, AttributeError, ValueError, RecursionError):
                raise RowError(path, lineno, "doc", "expected a RareArena document with its meta (orpha_name)") \
                    from None
            tasks.setdefault(task_of(path), []).append(case)
    return tasks


def judge_run(run_dir: str | Path, judge, tasks: dict | None = None) -> dict:
    """Grade a finished run's logged RareArena samples with ``judge`` (a
    :class:`~medr2_hooks.lmeval.judge_client.Judge`: replies come from the stage cache where the run's own filter
    asked the same); writes ``RUN_DIR/judged.json`` and returns it. ``tasks``: the run's cases, already read."""
    from ..fs import write_json
    from ..lmeval.diagnosis import judged_metrics

    tasks = read_cases(Path(run_dir)) if tasks is None else tasks
    result = {"judge": judge.backend.model_id, "tasks": {}}
    for task, cases in tasks.items():
        rows = [judged_metrics(g) for g in judge.grade(cases)]
        result["tasks"][task] = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]} | {"n": len(rows)}
    write_json(Path(run_dir) / "judged.json", result, ascii=True)
    return result
