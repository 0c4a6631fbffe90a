"""The one record every benchmark loader yields, and its split into what stages may see."""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Question:
    """What retrieval, reranking and LLM stages may see: never the gold answer.

    ``options`` is included for the answering prompt only; retrieval and rerank queries are built from
    ``question`` alone (see ``medr2_hooks.retrieve``). ``exclude_pmid``: the item's own article (PubMedQA), which
    retrieval must not return.
    """

    id: str
    question: str
    options: dict[str, str]
    language: str
    exclude_pmid: str | None = None


@dataclass(frozen=True)
class Demo:
    """A demonstration (training-side): its question and its gold answer, which only its own rendering sees."""

    question: Question
    answer: str


@dataclass(frozen=True)
class Record:
    """One benchmark item.

    ``options`` maps a choice label to its text, in presentation order: letters for multiple choice
    (``{"A": "...", ...}``), labels for PubMedQA (``{"yes": "yes", "no": "no", "maybe": "maybe"}``).
    ``answer`` is the gold label, a key of ``options`` (free-text benchmarks: no options, the gold text).
    ``meta`` holds source details (PubMedQA ``pmid``, MedMCQA ``subject``, MMLU ``subject``, the source file and
    line, ...).
    """

    id: str
    question: str
    options: dict[str, str]
    answer: str
    language: str
    meta: dict = field(default_factory=dict)

    @property
    def labels(self) -> list[str]:
        return list(self.options)

    @property
    def gold_index(self) -> int:
        return self.labels.index(self.answer)

    def public(self) -> Question:
        pmid = self.meta.get("pmid")
        return Question(self.id, self.question, dict(self.options), self.language, str(pmid) if pmid else None)

    def demo(self) -> Demo:
        return Demo(self.public(), self.answer)

    def to_doc(self) -> dict:
        """Flat, Arrow-friendly row for an lm-eval dataset (``meta`` as JSON text)."""
        return {
            "id": self.id,
            "question": self.question,
            "choice_labels": self.labels,
            "choice_texts": list(self.options.values()),
            "answer": self.answer,
            "gold": self.gold_index if self.options else -1,  # free-text items (RareArena) have no options
            "language": self.language,
            "meta": json.dumps(self.meta, ensure_ascii=False, sort_keys=True),
        }

    @classmethod
    def from_doc(cls, doc: dict) -> "Record":
        return cls(
            id=doc["id"],
            question=doc["question"],
            options=dict(zip(doc["choice_labels"], doc["choice_texts"])),
            answer=doc["answer"],
            language=doc["language"],
            meta=json.loads(doc["meta"]),
        )
