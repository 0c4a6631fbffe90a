"""MMLU medical subjects (6 subjects, 1,089 test items): header-less CSVs ``question,A,B,C,D,answer``."""

from __future__ import annotations

from pathlib import Path

from .readers import check_answer, iter_csv, require_file
from ..errors import RowError
from .record import Record

HUB = "cais/mmlu"
SUBJECTS = (
    "anatomy",
    "clinical_knowledge",
    "college_biology",
    "college_medicine",
    "medical_genetics",
    "professional_medicine",
)
_LETTERS = "ABCD"


def load(root: Path) -> list[Record]:
    records = []
    for subject in SUBJECTS:
        path = require_file(root / "mmlu_med" / "test" / f"{subject}_test.csv", hub=f"{HUB} {subject}")
        for line, row in iter_csv(path, 6):
            question, *texts, answer = row
            for letter, text in zip(_LETTERS, texts):
                if not text.strip():
                    raise RowError(path, line, letter, "option text is empty")
            if not question.strip():
                raise RowError(path, line, "question", "is empty")
            records.append(
                Record(
                    id=f"{subject}-{line:04d}",
                    question=question,
                    options=dict(zip(_LETTERS, texts)),
                    answer=check_answer(answer, list(_LETTERS), path, line, "answer"),
                    language="en",
                    meta={"subject": subject, "source": f"{path.name}:{line}"},
                )
            )
    return records


def load_hub() -> list[Record]:
    import datasets

    records = []
    for subject in SUBJECTS:
        for i, row in enumerate(datasets.load_dataset(HUB, subject, split="test"), 1):
            records.append(
                Record(
                    id=f"{subject}-{i:04d}",
                    question=row["question"],
                    options=dict(zip(_LETTERS, row["choices"])),
                    answer=_LETTERS[row["answer"]],
                    language="en",
                    meta={"subject": subject, "source": f"{HUB}:{subject}:test:{i}"},
                )
            )
    return records
