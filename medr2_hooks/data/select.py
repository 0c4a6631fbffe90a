"""Which records a task evaluates: a subject or split of a benchmark, never items a model was trained on."""

from __future__ import annotations

from ..errors import DataError
from .record import Record


def select(records: list[Record], subject: str | None = None, split: str | None = None) -> list[Record]:
    return [r for r in records if (subject is None or r.meta.get("subject") == subject)
            and (split is None or r.meta.get("split") == split)]


def refuse_trained(benchmark: str, records: list[Record], trained_items: list[str] | None, limit=None) -> None:
    """Error when an evaluated record (the first ``limit``, lm-eval's slice) is among the trained items."""
    if not trained_items:
        return
    evaluated = records[: int(limit)] if limit and float(limit) >= 1 else records
    both = sorted({f"{benchmark}:{r.id}" for r in evaluated} & set(trained_items))
    if both:
        raise DataError(f"{benchmark}: the model was fine-tuned on {len(both)} of the evaluated items "
                        f"(e.g. {', '.join(both[:3])}); evaluate a disjoint slice "
                        "(e.g. --metadata '{\"split\": \"test\"}')")
