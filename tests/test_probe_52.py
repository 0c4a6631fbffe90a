"""Issue 52: nothing of the user's deleted, no score of no task (each test failed on 397ef77)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from medr2_hooks.cli.main import main
from medr2_hooks.lmeval import answers as readers
from medr2_hooks.lmeval.diagnosis import parse_list

LETTERS = ["A", "B", "C", "D"]
OPTIONS = {label: f"option {label} text" for label in LETTERS}


def _rows(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _doc(answer: str, **extra) -> dict:
    return {"id": "x1", "choice_labels": LETTERS, "choice_texts": list(OPTIONS.values()), "answer": answer, **extra}


def _sample(doc, reply, metrics=("acc", "invalid", "acc_flexible", "invalid_flexible")) -> dict:
    return {"doc_id": 0, "doc": doc, "filter": "none", "resps": [[reply]], "metrics": list(metrics)}


def test_rescore_scores_each_task_apart_and_follows_no_link(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    stamp = "2026-12-07T07-00-00.123456"
    _rows(run / f"samples_medqa_usmle_direct_gen_{stamp}.jsonl", [_sample(_doc("A"), "the answer is (B)")])
    _rows(run / f"samples_medqa_usmle_medr2_gen_{stamp}.jsonl", [_sample(_doc("B"), "the answer is (B)")])
    # what `medr2 eval --tasks medqa_usmle_direct,medqa_usmle_direct_gen` records for the log-likelihood task
    _rows(run / f"samples_medqa_usmle_direct_{stamp}.jsonl",
          [{"doc_id": 0, "doc": _doc("B"), "filter": "none", "resps": [[["-1.0", "False"]]] * 4,
            "metrics": ["acc", "acc_norm"]}])
    os.symlink("..", run / "sub" / "loop")
    assert main(["rescore", str(run), "--reader", "generative", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {t: s["n"] for t, s in out["tasks"].items()} == {"medqa_usmle_direct_gen": 1, "medqa_usmle_medr2_gen": 1}
    assert out["tasks"]["medqa_usmle_direct_gen"]["acc"] == 0.0 and out["tasks"]["medqa_usmle_medr2_gen"]["acc"] == 1.0
    assert "log-likelihood" in out["skipped_tasks"]["medqa_usmle_direct"] and out["links_skipped"] == 1
    # a reader that does not fit the task is refused, never scored as all-invalid
    assert main(["rescore", str(run), "--reader", "diagnosis"]) == 2
    assert "read by --reader generative, not diagnosis" in capsys.readouterr().err
    medrag = _rows(tmp_path / f"samples_mirage_medqa_medrag_{stamp}.jsonl",
                   [_sample(_doc("A"), '{"answer_choice": "A"}', ("acc", "invalid", "acc_mirage"))])
    assert main(["rescore", str(medrag), "--reader", "generative"]) == 2
    assert "read by --reader medrag" in capsys.readouterr().err


BAD_ROWS = {
    "short choice_texts": (_sample({**_doc("D"), "choice_texts": ["a", "b"]}, "(D)"), "doc.choice_texts"),
    "resps a string": ({"doc_id": 0, "doc": _doc("A"), "filter": "none", "resps": "abc"}, "resps"),
    "resps [[]]": ({"doc_id": 0, "doc": _doc("A"), "filter": "none", "resps": [[]]}, "resps"),
    "doc null": (_sample(None, "x"), "doc"),
    "doc a string": (_sample("text", "x"), "doc"),
    "doc without answer": (_sample({"id": "x", "choice_labels": LETTERS}, "x"), "doc.answer"),
    "answer not a label": ({"id": "q", "reply": "x", "labels": LETTERS, "answer": "E"}, "answer"),
    "answer an int": ({"id": "q", "reply": "x", "labels": LETTERS, "answer": 1}, "answer"),
    "options a list": ({"id": "q", "reply": "x", "options": ["a", "b"], "answer": "A"}, "options"),
    "options of ints": ({"id": "q", "reply": "x", "options": {"A": 1, "B": 2}, "answer": "A"}, "options"),
    "labels []": ({"id": "q", "reply": "x", "labels": [], "answer": "A"}, "labels"),
    "labels 5": ({"id": "q", "reply": "x", "labels": 5, "answer": "A"}, "labels"),
    "labels [1, 2]": ({"id": "q", "reply": "x", "labels": [1, 2], "answer": 1}, "labels"),
    "labels [[A]]": ({"id": "q", "reply": "x", "labels": [["A"]], "answer": "A"}, "labels"),
    "no labels": ({"id": "q", "reply": "x", "answer": "A"}, "labels"),
    "reply not text": ({"id": "q", "reply": ["x"], "labels": LETTERS, "answer": "A"}, "reply"),
    "a NaN id": ('{"id": NaN, "reply": "x", "labels": ["A"], "answer": "A"}', None),
    "nested brackets": ("[" * 100000, None),
}


@pytest.mark.parametrize("case", list(BAD_ROWS))
def test_rescore_refuses_a_damaged_row_naming_file_line_and_field(case, tmp_path, capsys):
    row, field = BAD_ROWS[case]
    path = _rows(tmp_path / "replies.jsonl", [{"id": "q0", "reply": "x", "labels": LETTERS, "answer": "A"}, row])
    assert main(["rescore", str(path), "--reader", "generative", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}:2:" in err, err
    assert field is None or f"field {field!r}" in err, err


def test_rescore_refuses_repeated_ids_and_diagnoses_that_are_no_names(tmp_path, capsys):
    row = {"id": "q1", "reply": "the answer is (B)", "labels": LETTERS, "answer": "B"}
    assert main(["rescore", str(_rows(tmp_path / "dup.jsonl", [row] * 3)), "--reader", "generative"]) == 2
    assert "dup.jsonl:2: field 'id' 'q1' is repeated" in capsys.readouterr().err
    for answer in (5, None):
        path = _rows(tmp_path / "dx.jsonl", [{"id": "q", "reply": "1. Marfan syndrome", "answer": answer}])
        assert main(["rescore", str(path), "--reader", "diagnosis"]) == 2
        assert "dx.jsonl:1: field 'answer' expected the gold disease name" in capsys.readouterr().err


def test_rescore_json_parses_with_a_lone_surrogate_id_and_huge_numbers(tmp_path, capsys):
    path = _rows(tmp_path / "r.jsonl", ['{"id": "\\ud800", "reply": "{\\"answer_choice\\": \\"B\\", \\"n\\": '
                                        + "9" * 5000 + '}", "labels": ["A", "B"], "answer": "B"}'])
    assert main(["rescore", str(path), "--reader", "medrag", "--json", "--per_item"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tasks"]["r"]["acc"] == 1.0 and out["tasks"]["r"]["items"][0]["id"] == "\ud800"
    path = _rows(tmp_path / "d.jsonl", [{"id": 1, "reply": "9" * 5000 + ". x\n1. Marfan syndrome",
                                         "answer": "Marfan syndrome"}])
    assert main(["rescore", str(path), "--reader", "diagnosis", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tasks"]["d"]["n"] == 1


MB = 1_000_000
HOSTILE = {
    "statement and spaces": "The answer is" + " " * (MB - 13),
    "colon and spaces": "Answer:" + " " * MB,
    "braces": "{" * MB,
    "nested unclosed objects": '{"a":' * (MB // 5),
    "quoted keys": '{"' * (MB // 2),
    "siblings": '{"a":[' + "{}," * (MB // 3),
    "brackets": "[" * MB,
    "statements": "the answer is " * (MB // 14),
    "a long answer value": '{"answer_choice": "' + "A" * MB + '"}',
    "explanation spaces": "1. x" + " " * MB + "y",
    "because spaces": "1. x" + " " * MB + "because ",
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_every_reader_reads_a_megabyte_reply_in_under_a_second(case):
    text = HOSTILE[case]
    for read in (lambda t: readers.read_statement(t, LETTERS), lambda t: readers.read_flexible(t, OPTIONS),
                 lambda t: readers.read_json_choice(t, OPTIONS), lambda t: readers.read_mirage(t, LETTERS),
                 parse_list):
        started = time.perf_counter()
        read(text)
        assert time.perf_counter() - started < 1.0, case


def test_bounded_readers_read_as_before():
    assert readers.read_statement("so the answer is   (C).", LETTERS) == "C"
    assert readers.read_statement("Answer:  c", LETTERS) == "C"
    assert readers.read_json_choice('{"a": {"answer_choice": "B"}, "answer_choice": "A"} {"x": 1}', OPTIONS) == "B"
    assert readers.read_json_choice('{"answer_choice": "D"} and later {"answer_choice": "C"}', OPTIONS) == "C"
    assert readers.read_json_choice('"answer_choice": "B" {{{', OPTIONS) == "B"
    assert parse_list("1. Marfan syndrome   -   because of x\n2. Ehlers-Danlos syndrome, because y") == [
        "Marfan syndrome", "Ehlers-Danlos syndrome"]


def _recipe_file(tmp_path: Path, **overrides) -> str:
    import yaml

    recipe = {"name": "probe", "model": "embedded:gemma-270m", "output_dir": str(tmp_path / "out"),
              "train": [{"benchmark": "medqa_usmle", "split": "dev", "count": 4}],
              "evaluate": [{"benchmark": "medqa_usmle", "split": "test", "count": 10}], **overrides}
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


def test_finetune_refuses_a_folder_it_did_not_make_and_deletes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    for name in ("checkpoint-500", "checkpoint-1000", "final.tmp"):
        (out / name).mkdir(parents=True)
    (out / "loss.jsonl").write_text('{"step": 1000, "loss": 0.1}\n')
    before = sorted(p.name for p in out.iterdir())
    assert main(["finetune", _recipe_file(tmp_path), "--no_wandb"]) == 2
    assert "is not empty and was not made by medr2 finetune" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == before
    assert (out / "loss.jsonl").read_text() == '{"step": 1000, "loss": 0.1}\n'


@pytest.mark.parametrize("latest, message", [({}, "expected"), ({"checkpoint": "../../../../../etc"}, "expected"),
                                             ([1], "expected")])
def test_finetune_refuses_a_latest_marker_that_leads_elsewhere_before_loading(tmp_path, capsys, latest, message):
    out = tmp_path / "out"
    out.mkdir()
    (out / "medr2_finetune.json").write_text('{"recipe": "probe"}')
    (out / "latest.json").write_text(json.dumps(latest))
    started = time.perf_counter()
    assert main(["finetune", _recipe_file(tmp_path), "--no_wandb"]) == 2
    err = capsys.readouterr().err
    assert "latest.json: expected" in err and len(err.strip().splitlines()) == 1, err
    assert time.perf_counter() - started < 10  # refused before the model loads


@pytest.mark.parametrize("overrides, message", [
    ({"name": "../../../../tmp/x", "output_dir": None}, "is not a safe name"),
    ({"name": "/tmp/x", "output_dir": None}, "is not a safe name"),
    ({"epochs": 0}, "epochs must be >= 1"),
    ({"micro_batch": 0}, "micro_batch must be >= 1"),
    ({"max_steps": 0}, "max_steps must be >= 1"),
    ({"learning_rate": float("nan")}, "learning_rate must be a finite number"),
])
def test_finetune_recipes_that_cannot_train_are_refused_before_anything_loads(tmp_path, capsys, overrides, message):
    path = _recipe_file(tmp_path, **overrides)
    if overrides.get("output_dir", "") is None:
        import yaml

        raw = yaml.safe_load(Path(path).read_text())
        raw.pop("output_dir")
        Path(path).write_text(yaml.safe_dump(raw))
    assert main(["finetune", path, "--no_wandb"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_a_finetuned_folder_is_held_to_the_format_its_cells_read(tmp_path, capsys):
    from medr2_hooks.settings import REPO_ROOT

    shipped = (REPO_ROOT / "experiments" / "table2_embedded.yaml").read_text()
    letters = tmp_path / "letters.yaml"
    letters.write_text(shipped.replace("cpu_usmle_dev_slice_gen/final", "cpu_usmle_dev_slice/final")
                       .replace("~/.cache/medr2", os.environ.get("MEDR2_CACHE_DIR", "~/.cache/medr2")))
    assert main(["sweep", str(letters), "--dry-run", "--json"]) == 2
    assert "trains answer_format letters, chat false, but its cells are read as answer_format generative" in \
        capsys.readouterr().err
    # a trained folder is judged by its own manifest, wherever it lies
    folder = tmp_path / "mine" / "final"
    folder.mkdir(parents=True)
    (folder / "medr2_training.json").write_text(json.dumps({"recipe": {"answer_format": "letters", "chat": False}}))
    letters.write_text(shipped.replace("~/.cache/medr2/finetune/cpu_usmle_dev_slice_gen/final", str(folder)))
    assert main(["sweep", str(letters), "--dry-run", "--json"]) == 2
    assert f"checkpoint {folder} trains answer_format letters" in capsys.readouterr().err


def test_evaluating_a_checkpoint_on_a_task_that_reads_other_answers_is_refused(tmp_path, capsys):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "medr2_training.json").write_text(json.dumps({"recipe": {"model": "embedded:gemma-270m",
                                                                       "answer_format": "letters", "chat": False},
                                                            "trained_items": []}))
    assert main(["eval", "--tasks", "medqa_usmle_direct_gen", "--model", "hf", "--model_args",
                 f"pretrained={folder}", "--limit", "2", "--no_wandb"]) == 2
    assert "(evaluated on medqa_usmle_direct_gen) trains answer_format letters" in capsys.readouterr().err


@pytest.mark.parametrize("damage, message", [
    (b'{"doc": {"id": "q0"}, "acc": 1.0}\n{"doc": {"id"', "invalid JSON"),
    (b'{"doc": {"id": "q0"}, "acc": 1.0}\n\xff\n', "invalid UTF-8"),
    (b'{"doc": null, "acc": 1.0}\n', "field 'doc.id'"),
])
def test_report_reads_damaged_samples_as_one_line_errors(tmp_path, monkeypatch, capsys, damage, message):
    from medr2_hooks.experiments.config import load_experiment
    from medr2_hooks.experiments.expand import expand
    from medr2_hooks.experiments.sweep import run_dir

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    run = next(r for r in expand(load_experiment("table10_embedded")) if r.method == "direct")
    out = run_dir(run)
    (out / "model").mkdir(parents=True)
    (out / "run.json").write_text(json.dumps({"results": {run.task: {"acc,none": 1.0}}, "wall_seconds": 1.0}))
    (out / "model" / f"samples_{run.task}_2026.jsonl").write_bytes(damage)
    assert main(["report", "table10_embedded"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and f"samples_{run.task}_2026.jsonl" in err and len(err.splitlines()) == 1, err


def test_a_prepass_record_the_run_could_not_find_is_an_unknown_cost(tmp_path, monkeypatch):
    from medr2_hooks.experiments.config import load_experiment
    from medr2_hooks.experiments.expand import expand
    from medr2_hooks.experiments.report import load_runs
    from medr2_hooks.experiments.sweep import run_dir

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    run = next(r for r in expand(load_experiment("table10_embedded")) if r.method == "ablation_qrc")
    out = run_dir(run)
    (out / "model").mkdir(parents=True)
    (out / "run.json").write_text(json.dumps({"results": {run.task: {"acc,none": 1.0}}, "wall_seconds": 1.0,
                                              "prepass": {run.task: {"missing": "/gone/record.json"}}}))
    (out / "model" / f"samples_{run.task}_2026.jsonl").write_text(json.dumps({"doc": {"id": "q0"}, "acc": 1.0}) + "\n")
    got = load_runs([run])[run.name]
    assert got["score"] == 100.0 and got["prepass_seconds"] is None and got["model_calls"] is None


@pytest.mark.parametrize("damage, message", [(b'{"doc": {"id"', "invalid JSON"), (b"\xff\n", "invalid UTF-8"),
                                             (b'{"doc": 1, "filtered_resps": ["1. x"]}\n', "field 'doc'")])
def test_judge_reads_damaged_samples_as_one_line_errors(tmp_path, capsys, damage, message):
    (tmp_path / "samples_rarearena_rds_direct_2026.jsonl").write_bytes(damage)
    assert main(["judge", str(tmp_path), "--backend", "hf", "--model", "embedded:smollm2-135m-instruct"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "samples_rarearena_rds_direct_2026.jsonl" in err and len(err.splitlines()) == 1, err


def _experiment(tmp_path: Path, text: str) -> str:
    path = tmp_path / "exp.yaml"
    path.write_text("name: probe\nmodels:\n  - {name: gemma-270m, model: \"embedded:gemma-270m\"}\n"
                    "benchmarks: [medqa_usmle]\nwindows: [4096]\n" + text)
    return str(path)


def test_a_yaml_alias_bomb_is_refused_at_once(tmp_path, capsys):
    levels = "".join(f"  {c}: &{c} [{', '.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh"))
    path = _experiment(tmp_path, "methods: [direct]\nmetadata:\n  a: &a [x, x, x, x, x, x, x, x, x, x]\n" + levels)
    started = time.perf_counter()
    assert main(["sweep", path, "--dry-run"]) == 2
    assert "expands to over 100,000 values through its aliases" in capsys.readouterr().err
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize("text, message", [
    ("methods: [vanilla_rag]\nscoring: generative\ngen_kwargs: max_gen_toks=8000\n",
     "answer_tokens 8000 (the target's max_gen_toks) leaves 0 of the 4096-token window"),
    ("methods: [vanilla_rag]\nmethod_override: {delta: .nan}\n", "delta must be a finite number, found nan"),
    ("methods: [llm_amt]\nmethod_override: {relevance_threshold: .nan}\n", "relevance_threshold must be a finite"),
    ("methods: [medr2]\nmethod_override: {alpha: .nan}\n", "alpha must be a finite number"),
    ("methods: [vanilla_rag]\nmethod_override: {evidence_share: 1.0e-300}\n", "an evidence budget of 0 tokens"),
])
def test_settings_that_cannot_mean_what_they_say_are_refused(tmp_path, capsys, text, message):
    assert main(["sweep", _experiment(tmp_path, text), "--dry-run", "--json"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_an_unreachable_served_target_is_one_line_naming_the_url_without_its_password(capsys):
    args = ("model=embedded:gemma-270m,base_url=http://user:hunter2@127.0.0.1:9/v1/completions,"
            "tokenizer_backend=huggingface,tokenizer=embedded:gemma-270m")
    assert main(["eval", "--tasks", "medqa_usmle_direct", "--model", "local-completions", "--model_args", args,
                 "--limit", "1", "--no_wandb"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "hunter2" not in err, err
    assert "127.0.0.1:9/v1/completions cannot be reached" in err


def test_a_first_dry_run_before_the_demo_index_is_built_plans_without_a_cost(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    from medr2_hooks.experiments import budget

    # a fresh clone: the demo index is not built (only the index manifests are looked up in this empty cache)
    monkeypatch.setattr(budget, "settings", SimpleNamespace(cache_dir=lambda: tmp_path))
    assert main(["sweep", "experiments/table9_embedded.yaml", "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    unbuilt = [r for r in out["runs"] if r["method"] == "medr2"]
    assert unbuilt and all(r["cost"] is None and "until it is built" in r["cost_unavailable"] for r in unbuilt)
    assert all(r["cost"] is not None for r in out["runs"] if r["method"] == "direct")
