"""Long-prompt scoring: lm-eval's ``hf`` against ``hf-continuation`` on the same requests, in one run.

    python bench/bench_continuation.py [--tokens 2000 4000] [--ours-only 9400] [--options 4] [--json]

For each length in ``--tokens``, one MedQA-style request set (a real textbook passage repeated to the length,
``--options`` answer continuations) is scored by both models, each in its own process (peak RSS is per process):
wall seconds, peak RSS and the largest log-likelihood difference, with the ratios ours/hf. The two take turns for
``--rounds`` rounds (bench/timing.py's rule): the seconds ratio is the median of the rounds' ratios with its min-max.
Lengths in
``--ours-only`` are scored by ``hf-continuation`` only (where ``hf``'s full-sequence logits do not fit: a 9,400-token
Gemma-3 prompt needs ~20 GB of them).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import ratio, shown  # noqa: E402


def requests(lm, tokens: int, options: int) -> list:
    from medr2_hooks import data

    record = data.pools("medqa_usmle").eval[0]
    filler = (record.question + "\n") * 200
    ids = lm.tok_encode(filler)[: max(0, tokens - 64)]
    context = lm.tok_decode(ids) + f"\nQuestion: {record.question}\nAnswer:"
    out = []
    for letter, text in sorted(record.options.items())[:options]:
        out.append(((context, f" {letter}. {text}"), *lm._encode_pair(context, f" {letter}. {text}")))
    return out


def score(model: str, tokens: int, options: int) -> dict:
    """In this process: load ``model`` (hf or hf-continuation), score the requests, report."""
    from lm_eval.models.huggingface import HFLM

    from medr2_hooks.llm.embedded import resolve
    from medr2_hooks.lmeval.hf_continuation import ContinuationHFLM

    cls = ContinuationHFLM if model == "hf-continuation" else HFLM
    lm = cls(pretrained=resolve("embedded:gemma-270m"), dtype="float32", device="cpu", batch_size=1,
             max_length=max(8192, tokens + 256))
    reqs = requests(lm, tokens, options)
    started = time.perf_counter()
    got = lm._loglikelihood_tokens(reqs, disable_tqdm=True)
    return {"model": model, "tokens": len(reqs[0][1]) + len(reqs[0][2]), "requests": len(reqs),
            "seconds": round(time.perf_counter() - started, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "loglikelihoods": [ll for ll, _ in got]}


def child(model: str, tokens: int, options: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", model, "--tokens", str(tokens), "--options",
                          str(options)], capture_output=True, text=True)
    if out.returncode != 0:
        return {"model": model, "tokens": tokens, "failed": out.returncode, "stderr": out.stderr[-400:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, nargs="+", default=[2000, 4000])
    parser.add_argument("--ours-only", type=int, nargs="*", default=[9400])
    parser.add_argument("--options", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the two, taking turns")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(score(args.child, args.tokens[0], args.options)))
        return 0
    rows = []
    for tokens in args.tokens:
        runs = {"ours": [], "hf": []}
        for _ in range(args.rounds):  # each run scores for seconds, in a fresh process: a round is one of each
            runs["ours"].append(child("hf-continuation", tokens, args.options))
            runs["hf"].append(child("hf", tokens, args.options))
        ours, stock = runs["ours"][0], runs["hf"][0]
        row = {"tokens": ours.get("tokens", tokens), "ours": ours, "hf": stock}
        if not any("failed" in r for side in runs.values() for r in side):
            seconds = {side: [r["seconds"] for r in rs] for side, rs in runs.items()}
            row.update(seconds_ratio=ratio(seconds, "ours", "hf"),
                       rss_ratio=round(ours["peak_rss_mb"] / stock["peak_rss_mb"], 3),
                       max_abs_diff=max(abs(a - b) for a, b in zip(ours["loglikelihoods"], stock["loglikelihoods"])))
        rows.append(row)
    rows += [{"tokens": tokens, "ours": child("hf-continuation", tokens, args.options), "hf": None}
             for tokens in args.ours_only]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'tokens':>7} {'ours s':>8} {'hf s':>8} {'s ratio (median, min-max)':>26} {'ours MB':>8} {'hf MB':>8} "
          f"{'MB ratio':>8} {'max |Δll|':>10}")
    for r in rows:
        o, h = r["ours"], r["hf"] or {}
        print(f"{r['tokens']:>7} {o.get('seconds', 'fail')!s:>8} {h.get('seconds', '-')!s:>8} "
              f"{shown(r['seconds_ratio']) if 'seconds_ratio' in r else '-':>26} "
              f"{o.get('peak_rss_mb', 'fail')!s:>8} {h.get('peak_rss_mb', '-')!s:>8} {r.get('rss_ratio', '-')!s:>8} "
              f"{r.get('max_abs_diff', '-')!s:>10}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
