"""BioASQ Task B golden sets 7B-11B (2,310 questions with gold PubMed ids and gold snippets).

- :func:`load_yesno`: BioASQ-Y/N as MIRAGE builds it (``rawdata/build.py``): every ``yesno`` question, files read
  in the order 11, 10, 9, 8, 7 and batch 1..n; options yes/no. The gold PubMed ids stay in ``meta["gold_pmids"]``
  for the evidence scorer (stages never see ``meta``).
- :func:`questions`: all 2,310 questions (id, body, type, gold PubMed ids): the queries and relevance judgements
  of the ``bioasq_gold`` test collection (:mod:`medr2_hooks.evidence`).
- :func:`gold_documents`: one document per gold PubMed id that has gold snippets, its snippets deduplicated in
  file order (13,449): the ``bioasq_gold`` corpus (a collection where every document is some question's gold, so
  a method's accuracy over it is an upper bound of what it finds in a real corpus).
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path

from ..errors import DataError, RowError
from .readers import check_answer, field, require_file
from .record import Record

LABELS = ("yes", "no")
_PMID = re.compile(r"(?:pubmed/|^)(\d+)\s*$")


def files(root: Path) -> list[Path]:
    """The golden files in MIRAGE's order: task 11 first, then 10, 9, 8, 7; batches in order."""
    folder = require_file(root / "bioasq" / "Task11BGoldenEnriched" / "11B1_golden.json.gz").parent.parent
    out = []
    for task in (11, 10, 9, 8, 7):
        batches = sorted(folder.glob(f"Task{task}BGoldenEnriched/{task}B*_golden.json.gz"),
                         key=lambda p: int(re.search(r"B(\d+)_golden", p.name).group(1)))
        out += batches
    return out


def pmid(url: str, path: Path, line: int) -> str:
    found = _PMID.search(url.strip())
    if not found:
        raise RowError(path, line, "documents", f"not a PubMed URL or id: {url!r}")
    return found.group(1)


def _questions(paths: list[Path]) -> Iterator[tuple[Path, int, dict]]:
    for path in paths:
        try:
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DataError(f"{path}: unreadable BioASQ golden file ({exc})") from None
        for i, obj in enumerate(data.get("questions") or [], 1):
            if not isinstance(obj, dict):
                raise RowError(path, i, None, "expected a question object")
            yield path, i, obj


def questions(root: Path, paths: list[Path] | None = None) -> list[dict]:
    """Every question: ``{id, body, type, gold: [PubMed ids], snippets: [(pmid, text)]}``, in MIRAGE's order (or
    of the golden files ``paths``, in their order)."""
    out, seen = [], set()
    for path, i, obj in _questions(paths if paths is not None else files(root)):
        qid = field(obj, "id", path, i)
        if qid in seen:
            raise RowError(path, i, "id", f"question {qid} appears twice")
        seen.add(qid)
        gold = list(dict.fromkeys(pmid(u, path, i) for u in obj.get("documents") or []))
        snippets = [(pmid(s["document"], path, i), s["text"].strip()) for s in obj.get("snippets") or []
                    if isinstance(s, dict) and isinstance(s.get("text"), str) and s["text"].strip()]
        out.append({"id": qid, "body": field(obj, "body", path, i), "type": obj.get("type"), "gold": gold,
                    "snippets": snippets, "answer": _answer(obj, path, i) if obj.get("type") == "yesno" else None,
                    "source": f"{path.name}:{i}"})
    return out


def load_yesno(root: Path) -> list[Record]:
    return [Record(id=q["id"], question=q["body"], options={label: label for label in LABELS}, answer=q["answer"],
                   language="en", meta={"gold_pmids": q["gold"], "source": q["source"]})
            for q in questions(root) if q["type"] == "yesno"]


def gold_documents(root: Path, paths: list[Path] | None = None) -> list[tuple[str, str]]:
    """``(pmid, text)`` per gold PubMed id with snippets: its distinct snippets joined in file order."""
    texts: dict[str, list[str]] = {}
    for q in questions(root, paths):
        for doc, text in q["snippets"]:
            kept = texts.setdefault(doc, [])
            if text not in kept:
                kept.append(text)
    return [(doc, "\n".join(parts)) for doc, parts in texts.items()]


def _answer(obj: dict, path: Path, line: int) -> str:
    raw = obj.get("exact_answer")
    value = raw.strip().lower() if isinstance(raw, str) else raw
    return check_answer(value, list(LABELS), path, line, "exact_answer")
