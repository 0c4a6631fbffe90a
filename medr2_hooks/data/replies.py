"""Recorded replies, read back for ``medr2 rescore``: lm-eval's ``samples_<task>_<date>.jsonl`` files of a run
folder, or a user's JSONL file of replies. Each file is one task; every row is checked as it is read, and a row that
cannot mean what the scorer needs (a label list that is not one, an answer that is not an option, a repeated id,
a reply that is not text) is a one-line error naming the file, the line and the field. Nothing is read as an answer
that was not one.

A run folder is walked without following symbolic links (a link out of the folder or back into it would count a
file twice or read another run's replies); the links passed over are counted. A task whose replies are not text
(a log-likelihood task: lm-eval records a log-probability per option) or whose own scoring is another reader's is
set aside with its reason, never pooled with the others.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DataError, RowError
from .readers import iter_jsonl

READERS = ("generative", "medrag", "diagnosis")
# the metric each reader's task reports and no other task does (lm-eval lists a sample's metrics in the row)
_READER_METRIC = {"acc_mirage": "medrag", "acc_flexible": "generative", "top5_lenient": "diagnosis"}
# lm-eval names them samples_<task>_<datetime.isoformat() with "-" for ":">.jsonl
_SAMPLES = re.compile(r"samples_(?P<task>.+?)_(?P<date>\d{4}(?:-\d{2}-\d{2}T[0-9.\-]+)?)\.jsonl"
                      r"|samples_(?P<bare>.+)\.jsonl")


@dataclass(frozen=True)
class Reply:
    id: str | int
    reply: str
    answer: str
    options: dict[str, str]  # label -> text ("" where only labels are known); empty for a diagnosis
    doc: dict | None = None  # the lm-eval doc of a samples row


@dataclass
class TaskReplies:
    task: str
    file: Path
    replies: list[Reply] = field(default_factory=list)
    skipped: str | None = None  # why the task is not read (a log-likelihood task, another reader's task)


@dataclass
class Replies:
    tasks: list[TaskReplies]
    links_skipped: int = 0


def task_of(path: Path) -> str:
    """The task a samples file belongs to (lm-eval names it ``samples_<task>_<date>.jsonl``); a plain replies file
    is a task of its own, named by its stem."""
    m = _SAMPLES.fullmatch(path.name)
    return (m.group("task") or m.group("bare")) if m else path.stem


def sample_files(root: Path, task: str) -> list[Path]:
    """Task ``task``'s ``samples_<task>_<date>.jsonl`` under a run folder, found without following a link."""
    return [p for p in samples_under(root)[0] if task_of(p) == task]


def samples_under(root: Path) -> tuple[list[Path], int]:
    """``samples_*.jsonl`` under ``root``, sorted, without following a link; and how many links were passed over."""
    found, links = [], 0
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        links += sum((here / d).is_symlink() for d in dirs)
        for name in files:
            if name.startswith("samples_") and name.endswith(".jsonl"):
                if (here / name).is_symlink():
                    links += 1
                else:
                    found.append(here / name)
    return sorted(found), links


def load(path: Path, reader: str) -> Replies:
    """Every task's replies under ``path`` (a run folder, a samples file or a replies file), for ``reader``."""
    if reader not in READERS:
        raise DataError(f"unknown reader {reader!r}; readers: {', '.join(READERS)}")
    if path.is_dir():
        files, links = samples_under(path)
        if not files:
            raise DataError(f"{path}: no samples_*.jsonl (run the tasks with --log_samples) and not a JSONL file")
    else:
        files, links = [path], 0
    by_task: dict[str, list[Path]] = {}
    for file in files:
        by_task.setdefault(task_of(file), []).append(file)
    tasks = []
    for task, task_files in by_task.items():
        if len(task_files) > 1:
            raise DataError(f"{path}: task {task} has {len(task_files)} samples files "
                            f"({', '.join(str(f) for f in task_files)}): rescore one run at a time")
        tasks.append(_read_file(task, task_files[0], reader))
    return Replies(tasks, links)


def _read_file(task: str, file: Path, reader: str) -> TaskReplies:
    out = TaskReplies(task, file)
    seen: dict[object, int] = {}
    for lineno, row in iter_jsonl(file):
        if "doc" in row:
            if row.get("filter") not in (None, "none", "orphanet"):
                continue  # one reply per doc: the first filter's row (RareArena's judge filter repeats it)
            kind = _sample_kind(row, file, lineno)
            if kind != reader and not (kind == "options" and reader != "diagnosis"):
                out.skipped = {"loglik": "a log-likelihood task: its replies are log-probabilities, not text",
                               "options": "its items have options: read them with --reader generative or medrag"
                               }.get(kind, f"its replies are read by --reader {kind}, not {reader}")
                out.replies = []
                return out
            item = _sample(row, file, lineno, reader)
        else:
            item = _reply_row(row, file, lineno, reader)
        key = (type(item.id).__name__, item.id)
        if key in seen:
            raise RowError(file, lineno, "id", f"{item.id!r} is repeated (first on line {seen[key]}): one reply "
                           "per item")
        seen[key] = lineno
        out.replies.append(item)
    return out


def _sample_kind(row: dict, file: Path, line: int) -> str:
    """Which reader a samples row's task scores with: from the metrics lm-eval lists in the row, else from its doc
    and reply (options: either option reader; a free-text diagnosis); ``loglik`` when the replies are not text."""
    resps = row.get("resps")
    if not isinstance(resps, list) or not resps:
        raise RowError(file, line, "resps", f"expected a non-empty list of replies, found {_shown(resps)}")
    first = resps[0]
    if isinstance(first, list):
        if not first:
            raise RowError(file, line, "resps", "holds an empty reply list ([[]])")
        first = first[0]
    if isinstance(first, list):  # [[logprob, is_greedy]] per option
        return "loglik"
    metrics = row.get("metrics")
    for metric, reader in _READER_METRIC.items():
        if isinstance(metrics, list) and metric in metrics or metric in row:
            return reader
    doc = row.get("doc")
    if isinstance(doc, dict) and "choice_labels" not in doc and "meta" in doc:
        return "diagnosis"
    return "options"


def _sample(row: dict, file: Path, line: int, reader: str) -> Reply:
    doc = row["doc"]
    if not isinstance(doc, dict):
        raise RowError(file, line, "doc", f"expected the task's document (an object), found {_shown(doc)}")
    first = row["resps"][0]
    reply = first[0] if isinstance(first, list) else first
    if not isinstance(reply, str):
        raise RowError(file, line, "resps", f"expected a reply text, found {_shown(reply)}")
    ident = _identifier(doc.get("id", row.get("doc_id")), file, line, "doc.id")
    if reader == "diagnosis":
        meta = doc.get("meta")
        try:
            gold = json.loads(meta).get("orpha_name") if isinstance(meta, str) else None
        except (ValueError, RecursionError, AttributeError):
            gold = None
        if not isinstance(gold, str) or not gold.strip():
            raise RowError(file, line, "doc.meta", "expected RareArena's meta with the gold orpha_name")
        return Reply(ident, reply, gold, {}, doc)
    labels = _labels(doc.get("choice_labels"), file, line, "doc.choice_labels")
    texts = doc.get("choice_texts")
    if texts is None:
        texts = [""] * len(labels)
    if not isinstance(texts, list) or len(texts) != len(labels) or not all(isinstance(t, str) for t in texts):
        raise RowError(file, line, "doc.choice_texts", f"expected {len(labels)} option texts, one per label, found "
                       f"{_shown(texts)}")
    return Reply(ident, reply, _answer(doc.get("answer"), labels, file, line, "doc.answer"),
                 dict(zip(labels, texts)), doc)


def _reply_row(row: dict, file: Path, line: int, reader: str) -> Reply:
    for name in ("id", "reply", "answer"):
        if name not in row:
            raise RowError(file, line, name, "is missing: a reply line needs id, reply (text) and answer")
    if not isinstance(row["reply"], str):
        raise RowError(file, line, "reply", f"expected the reply's text, found {_shown(row['reply'])}")
    ident = _identifier(row["id"], file, line, "id")
    if reader == "diagnosis":
        if "labels" in row or "options" in row:
            raise RowError(file, line, "options", "the diagnosis reader reads free-text diagnoses: this reply has "
                           "options (use --reader generative or medrag)")
        answer = row["answer"]
        if not isinstance(answer, str) or not answer.strip():
            raise RowError(file, line, "answer", f"expected the gold disease name, found {_shown(answer)}")
        return Reply(ident, row["reply"], answer, {})
    options = row.get("options")
    if options is not None:
        if not isinstance(options, dict) or not options:
            raise RowError(file, line, "options", f'expected {{"A": "<text>", ...}}, found {_shown(options)}')
        labels = _labels(list(options), file, line, "options")
        if not all(isinstance(t, str) for t in options.values()):
            raise RowError(file, line, "options", "each option's text must be a string")
        if "labels" in row and row["labels"] != labels:
            raise RowError(file, line, "labels", f"{_shown(row['labels'])} are not the options' labels {labels}")
    elif "labels" in row:
        labels = _labels(row["labels"], file, line, "labels")
        options = {label: "" for label in labels}
    else:
        raise RowError(file, line, "labels", "is missing: a reply read against options needs labels or options")
    return Reply(ident, row["reply"], _answer(row["answer"], labels, file, line, "answer"), dict(options))


def _labels(value, file: Path, line: int, name: str) -> list[str]:
    ok = (isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value)
          and len(set(value)) == len(value))
    if not ok:
        raise RowError(file, line, name, f'expected distinct option labels such as ["A", "B"], found {_shown(value)}')
    return list(value)


def _answer(value, labels: list[str], file: Path, line: int, name: str) -> str:
    if not isinstance(value, str) or value not in labels:
        raise RowError(file, line, name, f"the gold answer {_shown(value)} is not one of the labels {labels}")
    return value


def _identifier(value, file: Path, line: int, name: str) -> str | int:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RowError(file, line, name, f"expected a string or integer id, found {_shown(value)}")
    return value


def _shown(value) -> str:
    from ..config import short_repr

    return f"{type(value).__name__} {short_repr(value, 80)}"
