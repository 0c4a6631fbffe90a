"""Our *_direct prompts and choices equal lm-eval's own built-in task configs on the same record."""

from __future__ import annotations

import datasets
import pytest

from medr2_hooks import data
from medr2_hooks.data import medqa
from medr2_hooks.data.mmlu import SUBJECTS

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def builtin():
    from lm_eval.tasks import TaskManager

    return TaskManager()


@pytest.fixture(scope="module")
def ours():
    from medr2_hooks.lmeval.registry import task_manager

    return task_manager()


def _task(manager, name: str, docs: list[dict]):
    """Instantiate task ``name`` from its YAML, with its dataset replaced by ``docs``."""
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = load_yaml(manager.task_index[name].yaml_path, resolve_func=True, recursive=True)
    split = datasets.Dataset.from_list(docs)
    dataset = datasets.DatasetDict(train=split, validation=split, test=split, dev=split, demos=split)
    return ConfigurableTask(config={**cfg, "custom_dataset": lambda **_: dataset})


def _rendered(task, doc):
    choices = task.doc_to_choice(doc)
    target = task.doc_to_target(doc)
    gold = choices.index(target) if isinstance(target, str) else target
    return task.fewshot_context(doc, 0), choices, choices[gold]


def _our_docs(benchmark, records):
    return [{**r.to_doc(), "benchmark": benchmark} for r in records]


def test_medqa_matches_medqa_4options(builtin, ours):
    records = medqa.load_usmle(data._root(None), options=4)[:25]
    theirs = [{"sent1": r.question, **{f"ending{i}": t for i, t in enumerate(r.options.values())},
               "label": r.gold_index} for r in records]
    b = _task(builtin, "medqa_4options", theirs)
    o = _task(ours, "medqa_usmle_direct", _our_docs("medqa_usmle", records))
    for their_doc, our_doc in zip(b.test_docs(), o.test_docs()):
        assert _rendered(o, our_doc) == _rendered(b, their_doc)


def test_medmcqa_matches_builtin(builtin, ours):
    records = data.load("medmcqa")[:25]
    theirs = [{"question": r.question, "opa": r.options["A"], "opb": r.options["B"], "opc": r.options["C"],
               "opd": r.options["D"], "cop": r.gold_index} for r in records]
    b, o = _task(builtin, "medmcqa", theirs), _task(ours, "medmcqa_direct", _our_docs("medmcqa", records))
    for their_doc, our_doc in zip(b.test_docs(), o.test_docs()):
        assert _rendered(o, our_doc) == _rendered(b, their_doc)


@pytest.mark.parametrize("subject", SUBJECTS)
def test_mmlu_subjects_match_builtin(builtin, ours, subject):
    records = [r for r in data.load("mmlu_med") if r.meta["subject"] == subject][:10]
    theirs = [{"question": r.question, "subject": subject, "choices": list(r.options.values()),
               "answer": r.gold_index} for r in records]
    b = _task(builtin, f"mmlu_{subject}", theirs)
    o = _task(ours, f"mmlu_med_direct_{subject}", _our_docs("mmlu_med", records))
    for their_doc, our_doc in zip(b.test_docs(), o.test_docs()):
        assert _rendered(o, our_doc) == _rendered(b, their_doc)
    assert o.config.description == b.config.description


def test_pubmedqa_is_builtin_prompt_without_the_abstract(builtin, ours, data_root):
    from medr2_hooks.data.readers import read_json

    raw = read_json(data_root / "pubmedqa" / "ori_pqal.json")
    records = data.load("pubmedqa")[:25]
    theirs = [{"QUESTION": r.question, "CONTEXTS": raw[r.id]["CONTEXTS"],
               "final_decision": raw[r.id]["final_decision"]} for r in records]
    b, o = _task(builtin, "pubmedqa", theirs), _task(ours, "pubmedqa_direct", _our_docs("pubmedqa", records))
    for their_doc, our_doc in zip(b.test_docs(), o.test_docs()):
        their_prompt, their_choices, their_gold = _rendered(b, their_doc)
        our_prompt, our_choices, our_gold = _rendered(o, our_doc)
        assert their_prompt.startswith("Abstract: ")
        assert our_prompt == their_prompt[their_prompt.index("\nQuestion: ") + 1:]
        assert (our_choices, our_gold) == (their_choices, their_gold)
