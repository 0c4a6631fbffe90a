"""PubMedQA PQA-L (1,000 expert-labelled items keyed by PMID), question only.

The gold abstract (CONTEXTS) and LONG_ANSWER are not part of the record: the paper answers from the question
alone, and the abstract would also leak the answer into retrieval. ``meta["pmid"]`` lets retrieval exclude
the question's own article.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import RowError
from .readers import check_answer, field, read_json, require_file
from .record import Record

HUB = "qiaojin/PubMedQA"
LABELS = ("yes", "no", "maybe")


def _record(pmid: str, obj: dict, path: object, line: int, test_ids: set[str]) -> Record:
    return Record(
        id=pmid,
        question=field(obj, "QUESTION", path, line),
        options={label: label for label in LABELS},
        answer=check_answer(obj.get("final_decision"), list(LABELS), path, line, "final_decision"),
        language="en",
        meta={"pmid": pmid, "year": obj.get("YEAR"), "official_test": pmid in test_ids},
    )


def load(root: Path) -> list[Record]:
    path = require_file(root / "pubmedqa" / "ori_pqal.json", hub=f"{HUB} pqa_labeled")
    data = read_json(path)
    if not isinstance(data, dict):
        raise RowError(path, 1, None, "expected an object keyed by PMID")
    truth = root / "pubmedqa" / "test_ground_truth.json"
    test_ids = set(read_json(truth)) if truth.is_file() else set()
    # JSON objects have no line numbers once parsed; the item's position stands in for it.
    return [_record(pmid, obj, path, i, test_ids) for i, (pmid, obj) in enumerate(data.items(), 1)]


def load_hub() -> list[Record]:
    import datasets

    rows = datasets.load_dataset(HUB, "pqa_labeled", split="train")
    return [
        _record(str(row["pubid"]), {"QUESTION": row["question"], "final_decision": row["final_decision"]},
                f"{HUB}:pqa_labeled", i, set())
        for i, row in enumerate(rows, 1)
    ]
