"""``medr2 rescore``: read recorded replies again, without a model, with the readers the tasks score with."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .output import emit_json

READERS = ("generative", "medrag", "diagnosis")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "Input: a finished run folder or its samples_<task>_*.jsonl (lm-eval --log_samples), or a JSONL file of\n"
        '  {"id": ..., "reply": "...", "labels": ["A", "B", ...], "answer": "C"}\n'
        '  (optionally "options": {"A": "<text>", ...} for the flexible reading; for --reader diagnosis "answer" is\n'
        "  the gold disease name, graded offline against Orphanet).\n"
        "Readers (medr2_hooks/lmeval/readers.py, the tasks' own): generative (strict: an explicit answer statement;\n"
        "acc_flexible beside it), medrag (MedRAG's JSON answer; acc_mirage: MIRAGE's scorer's rule, which reads an\n"
        "answer it cannot find as \"A\"), diagnosis (RareArena's five ranked diagnoses, offline Orphanet grade).\n"
        "examples:\n"
        "  medr2 rescore results/runs/<run> --reader generative --json\n"
        "  medr2 rescore gpt4_medqa_replies.jsonl --reader medrag --json --per_item")
    parser.add_argument("input", help="a run folder, a samples_*.jsonl file, or a JSONL file of replies")
    parser.add_argument("--reader", choices=READERS, required=True, help="how the replies are read")
    parser.add_argument("--per_item", "--per-item", dest="per_item", action="store_true",
                        help="add each reply's reading")
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")


def _items(path: Path) -> list[dict]:
    """``{"id", "reply", "options", "answer", "doc"}`` per reply, from samples files or a plain replies file."""
    from ..data.readers import iter_jsonl
    from ..errors import DataError, RowError

    files = sorted(path.rglob("samples_*.jsonl")) if path.is_dir() else [path]
    if not files:
        raise DataError(f"{path}: no samples_*.jsonl (run the tasks with --log_samples) and not a JSONL file")
    out = []
    for file in files:
        for lineno, row in iter_jsonl(file):
            if "doc" in row:  # an lm-eval sample: one reply per doc (the first filter's row)
                if row.get("filter") not in (None, "none", "orphanet"):
                    continue
                doc, resps = row["doc"], row.get("resps") or [[""]]
                reply = resps[0][0] if isinstance(resps[0], list) else resps[0]
                out.append({"id": doc.get("id", row.get("doc_id")), "reply": reply, "doc": doc, "answer": doc["answer"],
                            "options": dict(zip(doc.get("choice_labels") or [], doc.get("choice_texts") or []))})
                continue
            missing = [k for k in ("id", "reply", "answer") if k not in row]
            if missing or not isinstance(row.get("reply"), str):
                raise RowError(file, lineno, missing[0] if missing else "reply", "a reply line needs id, reply (text) "
                               "and answer")
            labels = row.get("labels") or list(row.get("options") or {})
            options = row.get("options") or {label: "" for label in labels}
            out.append({"id": row["id"], "reply": row["reply"], "answer": row["answer"], "options": options,
                        "doc": None})
    return out


def _read(item: dict, reader: str) -> dict:
    """One reply's reading and its scores."""
    from ..lmeval import readers

    reply, answer, options = item["reply"], item["answer"], item["options"]
    if reader == "diagnosis":
        from ..lmeval.diagnosis import grades, metrics, parse_list

        doc = item["doc"] or {"meta": json.dumps({"orpha_name": answer})}
        listed = parse_list(reply)
        return {"reading": listed, **metrics(listed, grades(doc, listed))}
    labels = list(options)
    if reader == "generative":
        strict, flexible = readers.read_statement(reply, labels), readers.read_flexible(reply, options)
        return {"reading": strict, "acc": float(strict == answer), "invalid": float(strict == readers.INVALID),
                "acc_flexible": float(flexible == answer), "invalid_flexible": float(flexible == readers.INVALID)}
    strict, mirage = readers.read_json_choice(reply, options), readers.read_mirage(reply, labels)
    return {"reading": strict, "mirage_reading": mirage, "acc": float(strict == answer),
            "invalid": float(strict == readers.INVALID), "acc_mirage": float(mirage == answer)}


def run(args: argparse.Namespace) -> int:
    from ..errors import DataError

    path = Path(args.input)
    if not path.exists():
        raise DataError(f"{path}: no such run folder or file")
    items = _items(path)
    if not items:
        raise DataError(f"{path}: no replies to read")
    read = [_read(item, args.reader) for item in items]
    keys = [k for k, v in read[0].items() if isinstance(v, float)]
    result = {"input": str(path), "reader": args.reader, "n": len(read),
              **{k: round(sum(r[k] for r in read) / len(read), 6) for k in keys}}
    if args.per_item:
        result["items"] = [{"id": item["id"], "answer": item["answer"], **r} for item, r in zip(items, read)]
    if args.json:
        emit_json(args, result)
    else:
        print("  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items()
                        if k != "items"))
    return 0
