"""Read MIRAGE's published replies with our readers, beside MIRAGE's published accuracies.

MIRAGE (Teddy-XiongGZ/MIRAGE) publishes every reply of its GPT-4 and GPT-3.5 runs (CoT, and MedRAG with 32 snippets
over MedCorp) as ``prediction/<dataset>/<setting>/<llm>/[<corpus>/<retriever>/]<split>_<id>.json`` (a JSON list of
replies; its scorer reads the first) and the items as ``benchmark.json``. With a clone of that repository::

    git clone https://github.com/Teddy-XiongGZ/MIRAGE /tmp/MIRAGE
    python bench/mirage_replies.py --mirage /tmp/MIRAGE --llm OpenAI/gpt-4-32k --setting rag_32/medcorp/RRF-4
    python bench/mirage_replies.py --mirage /tmp/MIRAGE --llm OpenAI/gpt-4-32k --setting cot

prints per dataset: items, our strict accuracy (``medrag`` reader: an answer that cannot be read is invalid and
wrong), the invalid rate, the accuracy under MIRAGE's own rule (``acc_mirage``: what its table reports) and the
published figure (experiments/mirage_numbers.csv). ``--out DIR`` also writes each dataset's replies as the JSONL
``medr2 rescore --reader medrag`` reads. Nothing of MIRAGE's is copied into this repository.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from medr2_hooks.lmeval.answers import INVALID, read_json_choice, read_mirage

DATASETS = {"mmlu": "mirage_mmlu", "medqa": "mirage_medqa", "medmcqa": "mirage_medmcqa", "pubmedqa": "mirage_pubmedqa",
            "bioasq": "mirage_bioasq"}
PUBLISHED = Path(__file__).resolve().parent.parent / "experiments" / "mirage_numbers.csv"


def published(llm: str, method: str) -> dict[str, str]:
    system = "GPT-4" if "gpt-4" in llm.lower() else "GPT-3.5"
    with open(PUBLISHED, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return {r["benchmark"]: r["value"] for r in rows if r["system"] == system and r["method"] == method
            and (method == "cot" or (r["corpus"], r["retriever"]) == ("MedCorp", "RRF-4"))}


def replies(mirage: Path, dataset: str, setting: str, llm: str) -> list[dict]:
    items = json.loads((mirage / "benchmark.json").read_text(encoding="utf-8")).get(dataset, {})
    split = "dev" if dataset == "medmcqa" else "test"
    parts = setting.split("/")
    folder = mirage / "prediction" / dataset / parts[0] / llm / Path(*parts[1:]) if len(parts) > 1 else \
        mirage / "prediction" / dataset / parts[0] / llm
    out = []
    for key in sorted(items):
        path = folder / f"{split}_{key}.json"
        if not path.is_file():
            continue
        answers = json.loads(path.read_text(encoding="utf-8"))
        item = items[key]
        out.append({"id": key, "reply": answers[0] if answers else "", "options": item["options"],
                    "labels": list(item["options"]), "answer": item["answer"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mirage", required=True, type=Path, help="a clone of Teddy-XiongGZ/MIRAGE")
    parser.add_argument("--llm", default="OpenAI/gpt-4-32k")
    parser.add_argument("--setting", default="rag_32/medcorp/RRF-4", help="rag_32/medcorp/RRF-4 or cot")
    parser.add_argument("--out", type=Path, help="write each dataset's replies as JSONL for medr2 rescore")
    args = parser.parse_args()
    anchors = published(args.llm, "cot" if args.setting == "cot" else "medrag")
    print("| dataset | n | ours: strict acc | invalid | MIRAGE's rule | published |\n|---|---|---|---|---|---|")
    for dataset, benchmark in DATASETS.items():
        rows = replies(args.mirage, dataset, args.setting, args.llm)
        if not rows:
            print(f"| {dataset} | 0 | | | | {anchors.get(benchmark, '')} |")
            continue
        strict = [read_json_choice(r["reply"], r["options"]) for r in rows]
        mirage = [read_mirage(r["reply"], r["labels"]) for r in rows]
        n = len(rows)
        acc = 100 * sum(s == r["answer"] for s, r in zip(strict, rows)) / n
        bad = 100 * sum(s == INVALID for s in strict) / n
        rule = 100 * sum(m == r["answer"] for m, r in zip(mirage, rows)) / n
        print(f"| {dataset} | {n} | {acc:.2f} | {bad:.2f} | {rule:.2f} | {anchors.get(benchmark, '')} |")
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            with open(args.out / f"{benchmark}.jsonl", "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


if __name__ == "__main__":
    main()
