"""``medr2 rescore``: read recorded replies again, without a model, with the readers the tasks score with; scored
per task, as lm-eval reports (replies of two tasks are never pooled into one number)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..data.replies import READERS, Reply
from .output import emit_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "Input: a finished run folder or its samples_<task>_*.jsonl (lm-eval --log_samples), or a JSONL file of\n"
        '  {"id": ..., "reply": "...", "labels": ["A", "B", ...], "answer": "C"}\n'
        '  (optionally "options": {"A": "<text>", ...} for the flexible reading; for --reader diagnosis "answer" is\n'
        "  the gold disease name, graded offline against Orphanet, and there are no options).\n"
        "Each task is scored on its own (a plain replies file is one task, named by its stem); a task whose replies\n"
        "are not text (log-likelihood) or are another reader's is listed under skipped_tasks with the reason. A run\n"
        "folder is walked without following symbolic links. A malformed row is an error naming its file and line.\n"
        "Readers (medr2_hooks/lmeval/answers.py, the tasks' own): generative (strict: an explicit answer statement;\n"
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


def _read(item: Reply, reader: str) -> dict:
    """One reply's reading and its scores."""
    from ..lmeval import answers as readers

    reply, answer, options = item.reply, item.answer, item.options
    if reader == "diagnosis":
        from ..lmeval.diagnosis import grades, metrics, parse_list

        doc = item.doc or {"meta": json.dumps({"orpha_name": answer})}
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


def _score(replies: list[Reply], reader: str, per_item: bool) -> dict:
    read = [_read(item, reader) for item in replies]
    keys = [k for k, v in read[0].items() if isinstance(v, float)]
    scored = {"n": len(read), **{k: round(sum(r[k] for r in read) / len(read), 6) for k in keys}}
    if per_item:
        scored["items"] = [{"id": item.id, "answer": item.answer, **r} for item, r in zip(replies, read)]
    return scored


def run(args: argparse.Namespace) -> int:
    from ..data import replies as recorded
    from ..errors import DataError

    path = Path(args.input)
    if not path.exists():
        raise DataError(f"{path}: no such run folder or file")
    loaded = recorded.load(path, args.reader)
    skipped = {t.task: t.skipped for t in loaded.tasks if t.skipped}
    empty = [t.task for t in loaded.tasks if not t.skipped and not t.replies]
    scored = {t.task: _score(t.replies, args.reader, args.per_item) for t in loaded.tasks if t.replies}
    if not scored:
        why = "; ".join(f"{task}: {reason}" for task, reason in skipped.items()) or "no replies to read"
        raise DataError(f"{path}: nothing to read with --reader {args.reader} ({why})")
    result = {"input": str(path), "reader": args.reader, "tasks": scored,
              "skipped_tasks": {**skipped, **{task: "no replies" for task in empty}},
              "links_skipped": loaded.links_skipped}
    if args.json:
        emit_json(args, result)
        return 0
    for task, s in scored.items():
        print(f"{task}  " + "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in s.items()
                                      if k != "items"))
    for task, reason in result["skipped_tasks"].items():
        print(f"{task}  skipped: {reason}")
    if loaded.links_skipped:
        print(f"{loaded.links_skipped} symbolic link(s) not followed")
    return 0
