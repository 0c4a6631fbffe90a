"""RareArena scoring: a ranked list of five diagnoses, parsed strictly, graded against Orphanet.

The prompt ends in ``Diagnoses:\\n1.`` and the model continues the list. :func:`parse_list` reads consecutive
numbered lines from 1, keeps the name before a trailing explanation (`` - ``, ``: ``, `` (``, ``;``,
`` because``), drops repeats, and stops at five, at a gap in the numbering or at the first line that is not a
list item. Fewer than five items are counted (``short_list``), none is ``invalid``; a list is never padded
with guesses. Grades (:mod:`medr2_hooks.data.orphanet`): ``top1``/``top5`` count a grade-2 diagnosis at rank 1
or within the first five; ``*_lenient`` also count a close hypernym (grade 1; RareArena's "total" recall).

The tasks have two filters over the same response: ``orphanet`` (the offline grade above, the lower bound) and
``judge`` (the run's LLM judge, :mod:`medr2_hooks.lmeval.judge`, the headline when the run names one; without a
judge that filter reports nothing), so lm-eval's table shows ``top5,judge`` beside ``top5,orphanet``.
"""

from __future__ import annotations

import json
import re

from ..data import orphanet

N_DIAGNOSES = 5
_ITEM = re.compile(r"^\s*(\d+)\s*[.)]\s*(.*)$")
_EXPLANATION = re.compile(r"\s+[-–—]\s+|:\s|\s\(|;|,?\s+because\s")


def parse_list(continuation: str) -> list[str]:
    """Diagnoses from the text the model wrote after ``Diagnoses:\\n1.``."""
    items: list[str] = []
    seen: set[str] = set()
    expected = 1
    for line in ("1." + continuation).split("\n"):
        m = _ITEM.match(line)
        if m is None or int(m.group(1)) != expected:
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
    from .judge import Judged, judged_metrics

    got = results[0]
    if isinstance(got, Judged):  # the judge filter's: nothing when the run names no judge
        return {} if got.graded is None else judged_metrics(got.graded)
    items = parse_list(got)
    return metrics(items, grades(doc, items))
