"""MedQA (USMLE English, MCMLE simplified Chinese): the release's ``{dev,test}.jsonl`` files.

The paper evaluates dev + test merged with 5 options (Table 7). ``options=4`` reads the 4-option files
(the MIRAGE / ``medqa_4options`` setting) instead.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import RowError
from .readers import check_answer, field, iter_jsonl, require_file
from .record import Record

_FOLDERS = {"usmle": ("medqa_usmle/US", "en"), "mcmle": ("medqa_mcmle/Mainland", "zh")}
_FOUR = {"usmle": "4_options/phrases_no_exclude_{split}.jsonl", "mcmle": "4_options/{split}.jsonl"}
HUB_USMLE = "GBaker/MedQA-USMLE-4-options"


def _local(variant: str, root: Path, options: int, splits: tuple[str, ...] = ("dev", "test")) -> list[Record]:
    folder, language = _FOLDERS[variant]
    records = []
    for split in splits:
        name = f"{split}.jsonl" if options == 5 else _FOUR[variant].format(split=split)
        path = require_file(root / folder / name, hub=HUB_USMLE if variant == "usmle" else None)
        for line, obj in iter_jsonl(path):
            opts = field(obj, "options", path, line, dict)
            if len(opts) != options:
                raise RowError(path, line, "options", f"expected {options} options, found {len(opts)}")
            for key, text in opts.items():
                field(opts, key, path, line, str)
            answer = check_answer(obj.get("answer_idx"), list(opts), path, line, "answer_idx")
            records.append(
                Record(
                    id=f"{split}-{line:05d}",
                    question=field(obj, "question", path, line),
                    options={k: opts[k] for k in sorted(opts)},
                    answer=answer,
                    language=language,
                    meta={"split": split, "meta_info": obj.get("meta_info"), "source": f"{path.name}:{line}"},
                )
            )
    return records


def load_usmle(root: Path, options: int = 5, splits: tuple[str, ...] = ("dev", "test")) -> list[Record]:
    return _local("usmle", root, options, splits)


def load_mcmle(root: Path, options: int = 5, splits: tuple[str, ...] = ("dev", "test")) -> list[Record]:
    """``splits=("train",)`` reads the release's training file (fine-tuning), when the folder has it."""
    return _local("mcmle", root, options, splits)


def load_usmle_hub(split: str = "test") -> list[Record]:
    """``GBaker/MedQA-USMLE-4-options`` (4 options, the test split: 1,273 items)."""
    import datasets

    rows = datasets.load_dataset(HUB_USMLE, split=split)
    return [
        Record(
            id=f"{split}-{i + 1:05d}",
            question=row["question"],
            options=dict(sorted(row["options"].items())),
            answer=row["answer_idx"],
            language="en",
            meta={"split": split, "meta_info": row.get("meta_info"), "source": f"{HUB_USMLE}:{split}:{i}"},
        )
        for i, row in enumerate(rows)
    ]
