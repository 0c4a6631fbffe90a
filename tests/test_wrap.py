"""``medr2 wrap``: a built-in lm-eval task wrapped with the method ``direct`` scores exactly as the built-in does,
log-likelihood by log-likelihood, on the same rows (local files in the hub layout, made from the shared data)."""

from __future__ import annotations

import json

import datasets
import pytest

from medr2_hooks import data

pytestmark = pytest.mark.filterwarnings("ignore")
N = 8


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDR2_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path / "results"))  # pre-pass records stay out of results/
    return tmp_path


@pytest.fixture(scope="module")
def lm(gemma_path):
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=gemma_path, batch_size=8, device="cpu")


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _mmlu_rows():
    records = [r for r in data.load("mmlu_med") if r.meta["subject"] == "anatomy"]
    row = lambda r: {"question": r.question, "subject": "anatomy", "choices": list(r.options.values()),  # noqa: E731
                     "answer": r.gold_index}
    return [row(r) for r in records[5:5 + N]], [row(r) for r in records[:5]]


def _medmcqa_rows():
    records = data.load("medmcqa")
    row = lambda r: {"id": r.id, "question": r.question, "opa": r.options["A"], "opb": r.options["B"],  # noqa: E731
                     "opc": r.options["C"], "opd": r.options["D"], "cop": r.gold_index, "choice_type": "single",
                     "exp": "", "subject_name": r.meta["subject"] or "", "topic_name": ""}
    return [row(r) for r in records[10:10 + N]], [row(r) for r in records[:10]]


def _builtin(task: str, test_rows: list[dict], demo_split: str, demo_rows: list[dict]):
    """The built-in task from lm-eval's own YAML, its dataset replaced by the same rows."""
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = load_yaml(TaskManager().task_index[task].yaml_path, resolve_func=True, recursive=True)
    test, demos = datasets.Dataset.from_list(test_rows), datasets.Dataset.from_list(demo_rows)
    splits = {s: (demos if s == demo_split else test) for s in ("train", "validation", "test", "dev")}
    return ConfigurableTask(config={**cfg, "custom_dataset": lambda **_: datasets.DatasetDict(splits)})


def _scores(lm, task) -> list[list[float]]:
    from lm_eval.evaluator import evaluate

    out = evaluate(lm=lm, task_dict={task.config.task: task}, log_samples=True, verbosity="ERROR")
    samples = out["samples"][task.config.task]
    return [[float(r[0]) for r in s["filtered_resps"]] for s in sorted(samples, key=lambda s: s["doc_id"])]


@pytest.mark.slow
@pytest.mark.parametrize("task,test_split,demo_split,rows", [("mmlu_anatomy", "test", "dev", _mmlu_rows),
                                                              ("medmcqa", "validation", "train", _medmcqa_rows)])
def test_wrapped_direct_equals_the_builtin_item_by_item(config_dir, lm, task, test_split, demo_split, rows, capsys):
    from medr2_hooks.cli.main import main
    from medr2_hooks.lmeval.registry import task_manager

    test_rows, demo_rows = rows()
    test = _jsonl(config_dir / "test.jsonl", test_rows)
    demos = _jsonl(config_dir / "demos.jsonl", demo_rows)
    assert main(["wrap", task, "--method", "direct", "--data-files", f"{test_split}={test},{demo_split}={demos}"]) == 0
    name = f"wrap_{task}_direct"
    capsys.readouterr()
    assert main(["benchmark", "show", f"wrap_{task}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tasks"] == [name]  # only the task the wrap made
    ours = task_manager().load([name])["tasks"][name]
    theirs = _builtin(task, test_rows, demo_split, demo_rows)
    assert len(ours.test_docs()) == len(theirs.test_docs()) == N
    for our_doc, their_doc in zip(ours.test_docs(), theirs.test_docs()):
        assert ours.fewshot_context(our_doc, 0) == theirs.fewshot_context(their_doc, 0)
        assert ours.doc_to_target(our_doc) == theirs.doc_to_target(their_doc)
    mine, builtin = _scores(lm, ours), _scores(lm, theirs)
    assert len(mine) == N and all(len(s) == 4 for s in mine)
    assert mine == builtin


def test_wrap_errors_name_what_to_fix(config_dir, capsys):
    from medr2_hooks.cli.main import main

    test_rows, _ = _mmlu_rows()
    test = _jsonl(config_dir / "test.jsonl", test_rows)
    with pytest.raises(Exception, match="only multiple_choice"):
        from medr2_hooks.lmeval.wrap import builtin_config

        builtin_config("gsm8k")
    # a split the built-in evaluates is missing from --data-files
    assert main(["wrap", "mmlu_anatomy", "--method", "direct", "--data-files", f"dev={test}"]) == 2
    assert "has no 'test' split" in capsys.readouterr().err
    # a field the mapping names is not in the rows: the file, the line and the field
    bad = _jsonl(config_dir / "bad.jsonl", [{k: v for k, v in r.items() if k != "choices"} for r in test_rows])
    assert main(["wrap", "mmlu_anatomy", "--method", "medr2", "--data-files", f"test={bad},dev={bad}"]) == 2
    assert f"{bad}:1: field 'choices' is missing" in capsys.readouterr().err


@pytest.mark.slow
def test_wrapped_medr2_puts_evidence_before_the_builtin_prompt(config_dir):
    """``--method medr2``: each prompt is the built-in description, then demonstrations and evidence, then the
    built-in prompt unchanged; the pre-pass saw the questions (never an answer)."""
    from medr2_hooks.cli.main import main
    from medr2_hooks.lmeval.registry import task_manager

    test_rows, demo_rows = _mmlu_rows()
    test = _jsonl(config_dir / "test.jsonl", test_rows)
    demos = _jsonl(config_dir / "demos.jsonl", demo_rows)
    assert main(["wrap", "mmlu_anatomy", "--method", "medr2", "--n-demos", "2",
                 "--data-files", f"test={test},dev={demos}"]) == 0
    small = {"limit": 2, "method_override": {"iterations": 1, "retrieve_k": 3, "coarse_k": 3, "conflict": {"top": 2},
                                             "max_demos": 2}}
    ours = task_manager(metadata=small).load(["wrap_mmlu_anatomy_medr2"])["tasks"]["wrap_mmlu_anatomy_medr2"]
    theirs = _builtin("mmlu_anatomy", test_rows, "dev", demo_rows)
    docs = list(ours.test_docs())
    assert len(docs) == 2
    description = "The following are multiple choice questions (with answers) about anatomy.\n\n"
    for our_doc, their_doc in zip(docs, theirs.test_docs()):
        mine, builtin = ours.fewshot_context(our_doc, 0), theirs.fewshot_context(their_doc, 0)
        question = builtin[len(description):]
        assert mine.startswith(description) and mine.endswith(question)
        prefix = mine[len(description):-len(question)]
        assert "Evidence:\n[1] " in prefix, prefix[:500]
        assert ours.doc_to_target(our_doc) == theirs.doc_to_target(their_doc)
