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
from ..data.select import refuse_trained, select


def load_dataset(benchmark: str, source: str = "local", data_dir: str | None = None, subject: str | None = None,
                 split: str | None = None, trained_items: list[str] | None = None, cases_file: str | dict
                 | None = None, limit=None,
                 judge: dict | None = None, method: str | None = None, medrag_template: str | None = None,
                 **_lm_eval_metadata):
    """``custom_dataset`` hook: ``DatasetDict(test=..., demos=...)`` of :meth:`Record.to_doc` rows (free-text
    rows carry the run's ``judge``, :func:`medr2_hooks.lmeval.judge.check_judge`)."""
    import datasets

    extra = {**judge_field(benchmark, judge), **answer_fields(method, medrag_template)}

    pools = data.pools(benchmark, source=source, data_dir=data_dir, cases_file=cases_file)
    evaluated = select(pools.eval, subject, split)
    refuse_trained(benchmark, evaluated, trained_items, limit)

    def rows(records: list[Record]) -> list[dict]:
        return [{**r.to_doc(), "benchmark": benchmark, **extra} for r in records]

    return datasets.DatasetDict(
        test=datasets.Dataset.from_list(rows(evaluated)),
        demos=datasets.Dataset.from_list(rows(select(pools.demos, subject))),
    )


def judge_field(benchmark: str, judge) -> dict:
    """``{"judge": <spec JSON or "">}`` for free-text benchmarks (the judge filter reads it), ``{}`` otherwise;
    a judge named for a benchmark scored by its options is an error."""
    from .judge import check_judge, preflight

    field = check_judge(benchmark, judge)
    if field:
        preflight(judge)  # before the target generates: a judge that cannot answer fails the run now
    return {"judge": field} if data.benchmark(benchmark).style == "diagnosis" else {}


MEDRAG_FIELDS = ("documents", "question", "options")  # what a user's MedRAG template places


def answer_fields(method: str | None, template_file: str | None) -> dict:
    """The doc fields a MedRAG-format task's rows carry (``system``, ``user_template``); ``{}`` for other methods (a
    run's --metadata reaches all its tasks: the template applies to its MedRAG-format ones)."""
    from .. import methods
    from ..config import ConfigError

    if method is None or methods.method(method).answer != "medrag":
        return {}
    if not template_file:
        return {"system": prompts.MEDRAG_SYSTEM, "user_template": ""}
    from ..fs import read_json

    given = read_json(template_file, "MedRAG template")
    if not isinstance(given, dict) or not all(isinstance(given.get(k), str) for k in ("system", "user")):
        raise ConfigError(f"{template_file}: a MedRAG template is a JSON object with string fields system and user")
    for name in MEDRAG_FIELDS:
        if "{" + name + "}" not in given["user"]:
            raise ConfigError(f"{template_file}: field user has no {{{name}}} placeholder ({', '.join(MEDRAG_FIELDS)})")
    return {"system": given["system"], "user_template": given["user"]}


def doc_to_text(doc: dict) -> str:
    return prompts.question_prompt(doc["benchmark"], Record.from_doc(doc).public())


def doc_to_choice(doc: dict) -> list[str]:
    return list(doc["choice_labels"])


def doc_to_target(doc: dict) -> int:
    return doc["gold"]
