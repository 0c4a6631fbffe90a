"""Every retrieval method's packs, fingerprinted: the check that a refactor of the pipeline changed no behaviour.

    .venv/bin/python bench/same_packs.py [--items 2] [--benchmarks medqa_usmle pubmedqa] > after.json
    diff before.json after.json

Prepares ``--items`` items of every retrieval task of the benchmarks (every method, both scorings) at the CPU twin's
sizes (experiments/settings.yaml ``cpu_twin``) from an empty stage cache (a fresh one per run, shared by the
methods of the run, the built indexes and converted models reused), and prints the sha256 of each task's packs (the
packs as written, keys sorted: the file's key and identity name the spec, which may change when nothing the target
reads does) as JSON, with the task's model calls. Run it on the commit before and after a change: equal hashes are
byte-identical packs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=2)
    parser.add_argument("--benchmarks", nargs="+", default=["medqa_usmle", "pubmedqa"])
    parser.add_argument("--methods", nargs="+", help="only these methods (default: every retrieval method)")
    args = parser.parse_args()

    home = Path(os.environ.get("MEDR2_CACHE_DIR", Path.home() / ".cache" / "medr2")).expanduser()
    work = Path(tempfile.mkdtemp(prefix="same_packs-"))
    (work / "cache").mkdir()
    for shared in ("indexes", "models"):
        (work / "cache" / shared).symlink_to(home / shared)
    os.environ.update(MEDR2_CACHE_DIR=str(work / "cache"), MEDR2_RESULTS_DIR=str(work / "results"),
                      HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    sys.path.insert(0, str(Path.cwd()))  # the checkout this is run from (a worktree of the commit before)

    from medr2_hooks.experiments.config import named_setting
    from medr2_hooks.lmeval.registry import task_hook_kwargs
    from medr2_hooks.prepass.prepare import prepare_tasks

    twin = named_setting("cpu_twin", "same_packs")["method_override"]
    names = [p.stem for b in args.benchmarks for p in sorted((Path.cwd() / "tasks" / b).glob(f"{b}_*.yaml"))]
    hooks = task_hook_kwargs(names, {"limit": args.items, "method_override": twin})  # the retrieval tasks
    if args.methods:
        hooks = {t: k for t, k in hooks.items() if k.get("method") in args.methods}
    out = {}
    for task, kwargs in hooks.items():
        done = prepare_tasks({task: kwargs}, log=lambda *_: None)[task]
        packs = json.loads(Path(done["packs"]).read_text(encoding="utf-8"))["packs"]
        canonical = json.dumps(packs, sort_keys=True, ensure_ascii=False).encode("utf-8")
        out[task] = {"sha256": hashlib.sha256(canonical).hexdigest(), "model_calls": done.get("model_calls")}
        print(f"{task}: {out[task]['sha256'][:16]}", file=sys.stderr)
    print(json.dumps({"commit": os.popen("git rev-parse --short HEAD").read().strip(), "items": args.items,
                      "tasks": out}, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
