"""MedXpertQA (Text): 10-option multiple choice (A–J).

Local: ``medxpertqa/medxpertqa_text_input.jsonl`` (the full 2,450-item test split) when the mirror has it,
otherwise the official 244-item sample ``medxpertqa_sampled_text_input.jsonl``. Options come as a list of
``{letter, content}`` there and as a ``{letter: text}`` mapping in the hub rows (``TsinghuaC3I/MedXpertQA``,
config ``Text``); both give the same :class:`Record`. Exactly one label, A–J, must be marked correct.

Every question of the release ends with its options inline (``\nAnswer Choices: (A) … (J) …``). The block is
split off at load time and must equal the ``options`` field (whitespace aside; an error naming file, line and
field otherwise): the question is the stem alone, so prompts list the options once and retrieval, reformulation
and the judges never see an option (the question-only rule).
"""

from __future__ import annotations

from pathlib import Path

from ..errors import RowError
from .readers import field, iter_jsonl, require_file
from .record import Record

HUB = "TsinghuaC3I/MedXpertQA"
LETTERS = "ABCDEFGHIJ"
INLINE = "Answer Choices:"
FULL, SAMPLE = "medxpertqa/medxpertqa_text_input.jsonl", "medxpertqa/medxpertqa_sampled_text_input.jsonl"


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
    return Record(
        id=str(field(obj, "id", path, line)), question=stem(field(obj, "question", path, line), options, path, line),
        options=options,
        answer=labels[0], language="en",
        meta={key: obj.get(key) for key in ("medical_task", "body_system", "question_type")} | {"source": f"{Path(str(path)).name}:{line}"},
    )


def stem(question: str, options: dict[str, str], path, line: int) -> str:
    """The question without its inline ``Answer Choices:`` block, after checking the block lists ``options``."""
    at = question.rfind(INLINE)
    if at < 0:
        return question
    block = " ".join(question[at + len(INLINE):].split())
    expected = " ".join(" ".join(f"({letter}) {text}" for letter, text in options.items()).split())
    if block != expected:
        raise RowError(path, line, "question", f"its inline {INLINE.strip()!r} block differs from the options field: "
                                               f"{block[:120]!r} vs {expected[:120]!r}")
    return question[:at].rstrip()


def load(root: Path) -> list[Record]:
    full = root / FULL
    path = full if full.is_file() else require_file(root / SAMPLE, hub=HUB)
    return [record(obj, path, line) for line, obj in iter_jsonl(path)]


def load_hub(split: str = "test") -> list[Record]:
    import datasets

    rows = datasets.load_dataset(HUB, "Text", split=split)
    return [record(dict(row), f"{HUB}:Text:{split}", i + 1) for i, row in enumerate(rows)]
