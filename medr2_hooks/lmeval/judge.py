"""An LLM judge for RareArena runs (the RareArena authors graded with GPT-4o on a 0/1/2 scale).

``medr2 judge RUN_DIR --backend openai --model gpt-4o`` re-grades the diagnosis lists logged in a run's
``samples_rarearena_*.jsonl`` files: each parsed prediction becomes one judge prompt (gold diagnosis,
predicted diagnosis, the scale), all prompts go to the backend in one batched call, and the first 0, 1 or 2
of the reply is the grade. A reply without one is counted (``unparseable``) and graded 0. The judged
metrics (same names as the offline ones) are written to ``RUN_DIR/judged.json`` beside the offline metrics.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..fs import atomic_write_text
from ..errors import DataError
from .diagnosis import metrics, parse_list

SCALE = ("Score 2 if the prediction names the same disease as the gold diagnosis (or a subtype of it), 1 if it "
         "names a closely related broader disease category that contains it, and 0 otherwise.")


def judge_prompt(backend, gold: str, prediction: str) -> str:
    user = f"Gold diagnosis: {gold}\nPredicted diagnosis: {prediction}\n\n{SCALE} Reply with the score only."
    return backend.chat(user) + "Score:"


def _grade(reply: str) -> int | None:
    m = re.search(r"[012]", reply)
    return int(m.group()) if m else None


def judge_run(run_dir: str | Path, backend) -> dict:
    files = sorted(Path(run_dir).rglob("samples_rarearena_*.jsonl"))
    if not files:
        raise DataError(f"{run_dir}: no samples_rarearena_*.jsonl (run a rarearena task with --log_samples)")
    cases = []  # (task, gold, items)
    for path in files:
        task = path.name[len("samples_"):].rsplit("_", 1)[0]
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            response = row["filtered_resps"][0] if isinstance(row["filtered_resps"], list) else row["filtered_resps"]
            cases.append((task, json.loads(row["doc"]["meta"])["orpha_name"], parse_list(response)))
    prompts = [judge_prompt(backend, gold, item) for _, gold, items in cases for item in items]
    replies = iter(backend.generate(prompts, max_new_tokens=4, stop=["\n"], role="judge") if prompts else [])
    per_task: dict[str, list[dict]] = {}
    unparseable = 0
    for task, _, items in cases:
        graded = []
        for _ in items:
            g = _grade(next(replies))
            unparseable += g is None
            graded.append(g or 0)
        per_task.setdefault(task, []).append(metrics(items, graded))
    result = {"judge": backend.model_id, "unparseable": unparseable, "judged_predictions": len(prompts),
              "tasks": {t: {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]} | {"n": len(rows)}
                        for t, rows in per_task.items()}}
    atomic_write_text(Path(run_dir) / "judged.json", json.dumps(result, indent=1))
    return result
