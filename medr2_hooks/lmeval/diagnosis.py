"""RareArena scoring: a ranked list of five diagnoses, parsed strictly, graded against Orphanet.

The prompt ends in ``Diagnoses:\\n1.`` and a base model continues the list; a chat model (under the chat template)
often writes a sentence first, or starts the list anew: :func:`parse_list` finds the list either way, and reads
consecutive numbered lines from 1, keeps the name before a trailing explanation (`` - ``, ``: ``, `` (``, ``;``,
`` because``), drops repeats, and stops at five, at a gap in the numbering or at the first line that is not a
list item. Fewer than five items are counted (``short_list``), none is ``invalid``; a list is never padded
with guesses. Grades (:mod:`medr2_hooks.data.orphanet`): ``top1``/``top5`` count a grade-2 diagnosis at rank 1
or within the first five; ``*_lenient`` also count a close hypernym (grade 1; RareArena's "total" recall).

The tasks have two filters over the same response: ``orphanet`` (the offline grade above, the lower bound) and
``judge`` (the run's LLM judge, :mod:`medr2_hooks.lmeval.judge`, the headline when the run names one; without a
judge that filter reports nothing), so lm-eval's table shows ``top5,judge`` beside ``top5,orphanet``. Reports
headline top-5 "total" recall (``top5_lenient``: scores 2 and 1, as RareArena publishes it), score-2 recall beside.
"""

from __future__ import annotations

import json
import re

from ..data import orphanet

N_DIAGNOSES = 5
_ITEM = re.compile(r"^[\s*_]*(\d+)\s*[.)]\s*(.*)$")
# a run of spaces is tried from its first space only, and taken whole (possessive): a line of a megabyte of spaces
# splits in linear time
_EXPLANATION = re.compile(r"(?<!\s)\s++[-–—]\s|:\s|\s\(|;|,?(?<!\s)\s++because\s")


def parse_list(reply: str) -> list[str]:
    """Diagnoses from a reply: the list continued after ``Diagnoses:\\n1.`` (a base model), or a numbered list
    anywhere in it (a chat model often opens with a sentence before "1.", or restarts the list at "1."); whichever
    reads more diagnoses (the list that starts on a line of its own when both read as many)."""
    continued = _numbered("1." + reply)
    start = re.search(r"^[ \t*_]*1\s*[.)]", reply, re.MULTILINE)
    anywhere = _numbered(reply[start.start():]) if start else []
    return anywhere if anywhere and len(anywhere) >= len(continued) else continued


def _numbered(text: str) -> list[str]:
    items: list[str] = []
    seen: set[str] = set()
    expected = 1
    for line in text.split("\n"):
        m = _ITEM.match(line)
        if m is None or m.group(1).lstrip("0") != str(expected):  # never int(): a 5,000-digit number is refused
            break
        expected += 1
        name = _EXPLANATION.split(m.group(2), maxsplit=1)[0].strip().rstrip(".").strip("*").strip()
        key = orphanet.normalise(name)
        if key and key not in seen:
            seen.add(key)
            items.append(name)
        if len(items) == N_DIAGNOSES:
            break
    return items


def grades(doc: dict, items: list[str]) -> list[int]:
    meta = json.loads(doc["meta"])
    tree = orphanet.load()
    return [tree.grade(item, meta["orpha_name"], meta.get("orpha_id"), meta.get("diagnosis", "")) for item in items]


def metrics(items: list[str], graded: list[int]) -> dict[str, float]:
    return {
        "top1": float(bool(graded) and graded[0] == 2), "top5": float(2 in graded[:N_DIAGNOSES]),
        "top1_lenient": float(bool(graded) and graded[0] >= 1), "top5_lenient": float(any(g >= 1 for g in graded)),
        "invalid": float(not items), "short_list": float(0 < len(items) < N_DIAGNOSES),
    }


def process_results(doc: dict, results: list) -> dict[str, float]:
    got = results[0]
    if isinstance(got, Judged):  # the judge filter's: nothing when the run names no judge
        return {} if got.graded is None else judged_metrics(got.graded)
    items = parse_list(got)
    return metrics(items, grades(doc, items))


def judged_metrics(graded: dict) -> dict[str, float]:
    m = metrics(graded["items"], graded["grades"])
    return {k: m[k] for k in ("top1", "top5", "top1_lenient", "top5_lenient")} | {
        "judge_unparseable": float(not graded["complete"])}


class Judged(str):
    """What the judge filter hands on for one doc: its grading as JSON text (what lm-eval logs as the filtered
    response: its sample logs take strings only), carrying the grading itself (what ``process_results`` reads);
    ``graded`` is None when the run names no judge."""

    graded: dict | None

    def __new__(cls, graded: dict | None) -> Judged:
        obj = super().__new__(cls, json.dumps(graded, ensure_ascii=False))
        obj.graded = graded
        return obj

    def __reduce__(self):  # pickled across ranks (lm-eval gathers samples): rebuilt from the grading
        return Judged, (self.graded,)
