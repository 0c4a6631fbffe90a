"""The cost estimate (``medr2 sweep --dry-run --json``) against what committed pre-pass records measured.

For each record in ``results/prepass/`` it estimates the same pre-pass (the record's method config, benchmark,
questions and demonstrations) and compares, per record:

- **asked**: what each stage was asked (cache hits + misses: questions, (query, document) pairs, documents, sets),
  estimated vs recorded, summed over the stages;
- **requests / prompt tokens / generated tokens**: the estimate's per-item figures of each stage times the items
  the record actually computed (its cache misses), against the model usage the record measured (which counts
  only misses: a warm cache is not a cheaper method);
- **packed**: the target's mean prompt tokens from the packs vs the estimated evaluation prompt.

    python bench/calibrate_cost.py [--json] [--run-pipeline] [RECORD.json ...]

``--run-pipeline``: the same comparison for the pipeline itself run against counting stand-ins (what
``medr2_hooks.experiments.cost.check_model`` holds the model to).

Prints one row per record and the median absolute error per column; within ±25% is the goal.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# the estimate's line stages -> the record's cache stage
CACHE_STAGE = {"cot_answer": "cot", "demo_cot_answer": "demo_cot"}
NO_MODEL = {"retrieve", "own_rank"}  # cached stages that call no language model (searches)


def estimate_record(record: dict):
    from medr2_hooks import data
    from medr2_hooks.experiments.cost import count_prepass
    from medr2_hooks.experiments.cost_sizes import tokens_for
    from medr2_hooks.experiments.cost_stages import evaluation
    from medr2_hooks.pipeline.config import MethodConfig

    cfg = MethodConfig.from_dict(record["config"], "record config")
    pools = data.pools(record["benchmark"])
    # a record without its label rule was made before served menus were read in one request (one per label then)
    run = count_prepass(cfg, record["benchmark"], [r.public() for r in pools.eval][: record["questions"]],
                        [r.public() for r in pools.demos][: record["demos"]], {},
                        per_label_menus="label_rule" not in record)
    evaluation(run, tokens_for(cfg.target_tokenizer), "letters", False, 0, True)
    return run


def modelled(record: dict) -> tuple[dict, float]:
    """Per cache stage, the counting model's items asked, items paid for and figures; its evaluation prompt."""
    run = estimate_record(record)
    per_stage = defaultdict(lambda: defaultdict(float))
    for line in run.lines:
        if line.phase != "prepass":
            continue
        stage = CACHE_STAGE.get(line.stage, line.stage)
        s = per_stage[stage]
        if line.stage not in CACHE_STAGE:
            s["items"] += line.items
            s["paid"] += line.items if line.requests else 0  # LLM-AMT's filter re-asks cached pairs: no requests
        for field in ("requests", "prompt_tokens", "generated_tokens"):
            s[field] += getattr(line, field)
    target = [line for line in run.lines if line.phase == "eval"][0]
    return per_stage, target.prompt_tokens_unique / max(target.items, 1)


def executed(record: dict) -> tuple[dict, float | None]:
    """The same from the pipeline itself run on the record's questions and demonstrations against counting
    stand-ins (medr2_hooks/experiments/cost_run.py): paid = the inputs its (empty) cache computed."""
    from medr2_hooks import data
    from medr2_hooks.experiments.cost_run import count_prepass
    from medr2_hooks.pipeline.config import MethodConfig

    cfg = MethodConfig.from_dict(record["config"], "record config")
    pools = data.pools(record["benchmark"])
    items = [r.public() for r in pools.eval][: record["questions"]]
    demos = [d.demo() for d in pools.demos][: record["demos"]]
    counted = count_prepass(cfg, record["benchmark"], items, demos, per_label_menus="label_rule" not in record)
    per_stage = defaultdict(lambda: defaultdict(float))
    for line in counted.lines:
        s = per_stage[line.stage]
        s["items"] += line.items
        for field in ("requests", "prompt_tokens", "generated_tokens"):
            s[field] += getattr(line, field)
    for stage, s in per_stage.items():
        s["paid"] = counted.cache.get(f"{stage}:miss", 0)
    return per_stage, counted.packed


def compare(record: dict, run_pipeline: bool = False) -> dict:
    per_stage, packed_estimate = (executed if run_pipeline else modelled)(record)
    cache = record["cache"]
    asked_est = asked_rec = 0.0
    est = dict.fromkeys(("requests", "prompt_tokens", "generated_tokens"), 0.0)
    unestimated = sorted({k.split(":")[0] for k in cache} - set(per_stage) - NO_MODEL)
    for stage, s in per_stage.items():
        hits, misses = cache.get(f"{stage}:hit", 0), cache.get(f"{stage}:miss", 0)
        asked_est += s["items"]
        asked_rec += hits + misses
        for field in est:  # the per-item figures of what was computed, times what the record computed
            est[field] += s[field] / s["paid"] * misses if s["paid"] else 0.0
    usage = record["usage"].values()
    rec = {"requests": sum(u["prompts"] for u in usage), "prompt_tokens": sum(u["prompt_tokens"] for u in usage),
           "generated_tokens": sum(u["generated_tokens"] for u in usage)}
    packed = record.get("packed_tokens") or {}
    return {"unestimated_stages": unestimated, "asked": (asked_est, asked_rec), **{k: (est[k], rec[k]) for k in est},
            "packed": (packed_estimate, packed.get("mean"))}


def error(pair) -> float | None:
    est, rec = pair
    return None if not rec or est is None else (est - rec) / rec


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("records", nargs="*", help="pre-pass records (default: every results/prepass/*.json)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--run-pipeline", action="store_true",
                        help="count by running the pipeline itself against counting stand-ins (cost_run.py) instead "
                             "of the dry-run's model")
    args = parser.parse_args()
    paths = [Path(p) for p in args.records] or sorted((ROOT / "results" / "prepass").glob("*.json"))
    rows = []
    for path in paths:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not record.get("usage") and not any(v for k, v in record.get("cache", {}).items() if k.endswith(":miss")):
            continue
        rows.append({"record": path.name, **compare(record, args.run_pipeline)})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    columns = ("asked", "requests", "prompt_tokens", "generated_tokens", "packed")
    print("| record | " + " | ".join(f"{c}: est / rec (err)" for c in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for row in rows:
        cells = []
        for c in columns:
            est, rec = row[c]
            e = error(row[c])
            cells.append(f"{est:,.0f} / {rec:,.0f} ({e:+.0%})" if e is not None else f"{est:,.0f} / {rec or 0:,.0f}")
        missing = f" (not estimated: {', '.join(row['unestimated_stages'])})" if row["unestimated_stages"] else ""
        print(f"| {row['record']}{missing} | " + " | ".join(cells) + " |")
    medians = {c: statistics.median(abs(e) for e in (error(r[c]) for r in rows) if e is not None) for c in columns
               if any(error(r[c]) is not None for r in rows)}
    print("median |error|: " + ", ".join(f"{c} {v:.0%}" for c, v in medians.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
