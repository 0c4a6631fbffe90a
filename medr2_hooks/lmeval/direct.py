"""Direct-response tasks (``*_direct``): the benchmark question, no retrieval.

The dataset hook runs once per task (lm-eval's ``custom_dataset``) and returns two splits: ``test`` (the
evaluation pool) and ``demos`` (the seeded CoT-demonstration pool, usable with ``--num_fewshot``). Task
metadata selects the benchmark and options: ``benchmark``, ``source`` (``local``/``hub``), ``data_dir``,
``subject`` (MMLU-Med subtasks).
"""

from __future__ import annotations

from .. import data
from ..apply import prompts
from ..data.record import Record


def load_dataset(benchmark: str, source: str = "local", data_dir: str | None = None, subject: str | None = None,
                 **_lm_eval_metadata):
    """``custom_dataset`` hook: ``DatasetDict(test=..., demos=...)`` of :meth:`Record.to_doc` rows."""
    import datasets

    pools = data.pools(benchmark, source=source, data_dir=data_dir)

    def rows(records: list[Record]) -> list[dict]:
        keep = [r for r in records if subject is None or r.meta.get("subject") == subject]
        return [{**r.to_doc(), "benchmark": benchmark} for r in keep]

    return datasets.DatasetDict(
        test=datasets.Dataset.from_list(rows(pools.eval)),
        demos=datasets.Dataset.from_list(rows(pools.demos)),
    )


def doc_to_text(doc: dict) -> str:
    return prompts.question_prompt(doc["benchmark"], Record.from_doc(doc).public())


def doc_to_choice(doc: dict) -> list[str]:
    return list(doc["choice_labels"])


def doc_to_target(doc: dict) -> int:
    return doc["gold"]
