"""MedXpertQA (Text): 10-option multiple choice (A–J).

Local: the full 2,450-item Text test split when the mirror has it (``medxpertqa/medxpertqa_text.jsonl``, a hub
dump with options as a ``{letter: text}`` mapping and ``label`` a string; or the official
``medxpertqa_text_input.jsonl``), otherwise the official 244-item sample ``medxpertqa_sampled_text_input.jsonl``
(also the named subset ``medxpertqa_sampled``). Options come as a list of ``{letter, content}`` in the official
files and as a mapping in the dump and the hub rows (``TsinghuaC3I/MedXpertQA``, config ``Text``); all give the same
:class:`Record`. Exactly one label, A–J, must be marked correct.

Every question ends with its options inline (``\nAnswer Choices: (A) … (J) …``). The block is split off at load
time, so the question is the stem alone: prompts list the options once and retrieval, reformulation and the
judges never see an option (the question-only rule). The ``options`` field is authoritative (the official
evaluation reads it): a row whose inline block differs (line 2231 of the dump, ``Text-2230``: ``(I) 15-16%`` where
the field says ``15-26%``) is kept, marked ``meta["inline_mismatch"]`` and counted (``medr2 data info``).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import RowError
from .readers import field, iter_jsonl, require_file
from .record import Record

HUB = "TsinghuaC3I/MedXpertQA"
LETTERS = "ABCDEFGHIJ"
INLINE = "Answer Choices:"
FULL = ("medxpertqa/medxpertqa_text_input.jsonl", "medxpertqa/medxpertqa_text.jsonl")  # official name, the dump
SAMPLE = "medxpertqa/medxpertqa_sampled_text_input.jsonl"


def record(obj: dict, path, line: int) -> Record:
    raw = field(obj, "options", path, line, (list, dict))
    if isinstance(raw, dict):
        pairs = list(raw.items())
    else:
        pairs = [(field(o, "letter", path, line), field(o, "content", path, line)) for o in raw]
    options = {}
    for letter, text in pairs:
        if letter not in LETTERS:
            raise RowError(path, line, "options", f"option letter {letter!r} is not one of A–J")
        if not isinstance(text, str) or not text.strip():
            raise RowError(path, line, "options", f"option {letter} is empty")
        options[letter] = text
    label = obj.get("label")
    labels = [label] if isinstance(label, str) else list(label or [])
    if len(labels) != 1:
        raise RowError(path, line, "label", f"expected exactly one correct option, found {len(labels)}: {labels}")
    if labels[0] not in options:
        raise RowError(path, line, "label", f"answer {labels[0]!r} is not one of the options {list(options)}")
    question, mismatch = stem(field(obj, "question", path, line), options)
    meta = {key: obj.get(key) for key in ("medical_task", "body_system", "question_type")}
    return Record(id=str(field(obj, "id", path, line)), question=question, options=options, answer=labels[0],
                  language="en", meta=meta | {"source": f"{Path(str(path)).name}:{line}"}
                  | ({"inline_mismatch": True} if mismatch else {}))


def stem(question: str, options: dict[str, str]) -> tuple[str, bool]:
    """The question without its inline ``Answer Choices:`` block, and whether that block differs from ``options``
    (whitespace aside; the options field wins)."""
    at = question.rfind(INLINE)
    if at < 0:
        return question, False
    block = " ".join(question[at + len(INLINE):].split())
    expected = " ".join(" ".join(f"({letter}) {text}" for letter, text in options.items()).split())
    return question[:at].rstrip(), block != expected


def full_split(root: Path) -> Path | None:
    return next((root / name for name in FULL if (root / name).is_file()), None)


def load(root: Path) -> list[Record]:
    """The full Text test split when present, else the official sample."""
    path = full_split(root) or require_file(root / SAMPLE, hub=HUB)
    return [record(obj, path, line) for line, obj in iter_jsonl(path)]


def load_sampled(root: Path) -> list[Record]:
    """The official 244-item sample (MedXpertQA's own smaller evaluation set)."""
    path = require_file(root / SAMPLE, hub=HUB)
    return [record(obj, path, line) for line, obj in iter_jsonl(path)]


def load_hub(split: str = "test") -> list[Record]:
    import datasets

    rows = datasets.load_dataset(HUB, "Text", split=split)
    return [record(dict(row), f"{HUB}:Text:{split}", i + 1) for i, row in enumerate(rows)]
