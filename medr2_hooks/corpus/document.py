"""One document record for every source, and the report of what a lenient build skipped."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..errors import RowError

SOURCE_TYPES = ("paper", "entry", "book", "guideline")

# Evidence levels e ∈ 1..9 (1 = most credible; f_h = 9 − (e − 1)). Guidelines are fixed at e = 3 (f_h = 7).
GUIDELINE_LEVEL = 3


@dataclass(frozen=True)
class Document:
    doc_id: str
    title: str
    text: str
    source_type: str
    language: str
    evidence_level: int | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.source_type not in SOURCE_TYPES:
            raise ValueError(f"source_type must be one of {SOURCE_TYPES}, found {self.source_type!r}")
        if self.source_type == "guideline" and self.evidence_level != GUIDELINE_LEVEL:
            object.__setattr__(self, "evidence_level", GUIDELINE_LEVEL)

    def to_json(self) -> dict:
        return {"doc_id": self.doc_id, "title": self.title, "text": self.text, "source_type": self.source_type,
                "language": self.language, "evidence_level": self.evidence_level, "meta": self.meta}

    @classmethod
    def from_json(cls, obj: dict) -> "Document":
        return cls(**obj)


@dataclass
class SkipReport:
    """Problems met while reading sources.

    ``strict`` raises at the first problem (a :class:`RowError` naming file, line and field); otherwise each
    problem is counted by reason and the first few are kept as examples for the build summary.
    """

    strict: bool = True
    counts: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def problem(self, path: object, line: int, field_name: str | None, reason: str, detail: str = "") -> None:
        error = RowError(path, line, field_name, f"{reason}{': ' + detail if detail else ''}")
        if self.strict:
            raise error
        self.counts[reason] += 1
        if len(self.examples) < 20:
            self.examples.append(str(error))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_json(self) -> dict:
        return {"strict": self.strict, "skipped": dict(sorted(self.counts.items())), "examples": self.examples}
