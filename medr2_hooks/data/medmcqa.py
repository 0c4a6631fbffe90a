"""MedMCQA: the labelled dev split (4,183; ``cop`` is 1–4 for opa..opd). Its test split has no answers."""

from __future__ import annotations

from pathlib import Path

from ..errors import RowError
from .readers import field, iter_jsonl, require_file
from .record import Record

HUB = "openlifescienceai/medmcqa"
_LETTERS = "ABCD"


def _record(obj: dict, path: object, line: int) -> Record:
    options = {letter: field(obj, f"op{letter.lower()}", path, line) for letter in _LETTERS}
    cop = field(obj, "cop", path, line, int)
    if not 1 <= cop <= 4:
        raise RowError(path, line, "cop", f"expected 1-4, found {cop}")
    return Record(
        id=field(obj, "id", path, line),
        question=field(obj, "question", path, line),
        options=options,
        answer=_LETTERS[cop - 1],
        language="en",
        meta={
            "subject": obj.get("subject_name"),
            "topic": obj.get("topic_name"),
            "choice_type": obj.get("choice_type"),
            "source": f"{Path(str(path)).name}:{line}",
        },
    )


def load(root: Path) -> list[Record]:
    path = require_file(root / "medmcqa" / "dev.json", hub=HUB)
    return [_record(obj, path, line) for line, obj in iter_jsonl(path)]


def load_hub(split: str = "validation") -> list[Record]:
    """The hub rows carry ``cop`` as 0–3; shifted to the release's 1–4 before validation."""
    import datasets

    rows = datasets.load_dataset(HUB, split=split)
    return [_record({**row, "cop": row["cop"] + 1}, f"{HUB}:{split}", i) for i, row in enumerate(rows)]
