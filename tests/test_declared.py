"""Benchmarks declared in YAML (issue 15): one file and one command give every method's task; bad rows and bad
declarations are one-line errors naming the file, the line and the field."""

from __future__ import annotations

import csv
import json

import pytest

from medr2_hooks import data
from medr2_hooks.cli.main import main

# the README's "CPU twin on a small slice" settings: fewer iterations and candidates
SMALL = {"method_override": {"iterations": 2, "retrieve_k": 3, "coarse_k": 3, "conflict": {"top": 2}, "max_demos": 2}}
HEADER = ["link", "question", "opa", "opb", "opc", "opd", "ope", "answer_idx", "answer", "explanation"]
DECLARATION = """name: my_usmle
title: My USMLE-style set (5 options)
source: {{format: csv, path: {path}}}
fields: {{id: link, question: question, options: [opa, opb, opc, opd, ope], answer: answer_idx}}
answer_format: letter
language: en
n_demos: 5
kind: qa
"""


def _rows(n: int = 30) -> list[list[str]]:
    """USMLE-style rows made from the shared MedQA items (5 options), with an explanation that names the answer."""
    out = []
    for i, r in enumerate(data.load("medqa_usmle")[:n]):
        out.append([f"https://example.org/q/{i}", r.question, *r.options.values(), r.answer, r.options[r.answer],
                    f"EXPLANATION {i}: the answer is {r.options[r.answer]}"])
    return out


def _start_lines(path) -> list[int]:
    """The line each data row starts on (MedQA questions hold line breaks, so rows span lines)."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader, out = csv.reader(fh), []
        next(reader)
        start = reader.line_num + 1
        for _ in reader:
            out.append(start)
            start = reader.line_num + 1
    return out


def _write(folder, rows, header=HEADER, declaration=DECLARATION):
    path = folder / "my_usmle.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    decl = folder / "my_usmle.yaml"
    decl.write_text(declaration.format(path=path))
    return decl, path


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDR2_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path / "results"))  # pre-pass records stay out of results/
    return tmp_path


def test_one_yaml_and_one_command_give_every_methods_task(config_dir, capsys):
    from lm_eval.tasks import TaskManager

    from medr2_hooks.lmeval.registry import task_manager

    decl, _ = _write(config_dir, _rows())
    assert main(["benchmark", "add", str(decl), "--json"]) == 0
    added = json.loads(capsys.readouterr().out)
    from medr2_hooks.methods import task_methods

    from medr2_hooks.methods import scorings_for, task_name

    methods = task_methods()
    assert added["items"] == 30 and added["skipped"] == 0
    assert added["tasks"] == [task_name("my_usmle", m, s) for m in methods for s in scorings_for("medqa", m)]
    assert {"my_usmle_medr2_gen", "my_usmle_ablation_qr", "my_usmle_medrag"} <= set(added["tasks"])
    assert "my_usmle" in data.names()
    pools = data.pools("my_usmle")
    assert (len(pools.eval), len(pools.demos)) == (25, 5) and pools.eval[0].options.keys() == set("ABCDE")
    assert pools.demos == data.pools("my_usmle").demos  # seeded

    assert main(["benchmark", "show", "my_usmle", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["eval"], shown["demos"], shown["kind"]) == (25, 5, "qa")
    assert shown["tasks"] == sorted(added["tasks"])
    assert main(["data", "info", "my_usmle", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"my_usmle": {"eval": 25, "demos": 5}}

    ours = task_manager()
    assert set(added["tasks"]) <= set(ours.all_tasks) and "medqa_usmle_medr2" in ours.all_tasks
    task = ours.load(["my_usmle_direct"])["tasks"]["my_usmle_direct"]
    docs = list(task.test_docs())
    assert len(docs) == 25
    prompt = task.fewshot_context(docs[0], 0)
    assert prompt.startswith("Question: ") and "\nE. " in prompt and prompt.endswith("Answer:")
    assert not any("EXPLANATION" in json.dumps(d) for d in docs)  # unmapped columns are never read
    # plain lm_eval --include_path $(medr2 tasks path): one folder with the shipped tasks and the user's
    assert main(["tasks", "path"]) == 0
    folder = capsys.readouterr().out.strip()
    plain = TaskManager(include_path=folder, include_defaults=False)
    assert {"my_usmle_medr2", "my_usmle_ablation_qr_gen", "medqa_usmle_medr2",
            "medr2_qa_direct"} <= set(plain.all_tasks)
    plain_task = plain.load(["my_usmle_direct"])["tasks"]["my_usmle_direct"]
    assert plain_task.fewshot_context(list(plain_task.test_docs())[0], 0) == prompt

    # experiment configs accept it
    from medr2_hooks.experiments.config import Experiment, ModelSpec

    Experiment(name="mine", models=[ModelSpec(name="gemma-270m", model="embedded:gemma-270m")],
               methods=["direct"], benchmarks=["my_usmle"], windows=[4096])

    assert main(["benchmark", "remove", "my_usmle"]) == 0
    assert "my_usmle" not in data.names() and "my_usmle_direct" not in task_manager().all_tasks


def test_an_edited_question_changes_the_prepass_key(config_dir):
    from medr2_hooks.prepass.spec import prepass_spec

    rows = _rows()
    decl, _ = _write(config_dir, rows)
    assert main(["benchmark", "add", str(decl)]) == 0
    before = prepass_spec("my_usmle", method="medr2")
    rows[20][1] = rows[20][1] + " (edited)"
    _write(config_dir, rows)
    after = prepass_spec("my_usmle", method="medr2")
    assert [r.id for r in before.eval_records] == [r.id for r in after.eval_records]
    assert before.key != after.key


@pytest.mark.parametrize("edit,message", [
    (lambda rows, header: (rows, [*header[:6], "opf", *header[7:]]), r"my_usmle.csv:1: field 'ope' is not a column"),
    (lambda rows, header: ([*rows[:3], [*rows[3][:7], "F", *rows[3][8:]], *rows[4:]], header),
     r"my_usmle.csv:{3}: field 'answer_idx' answer 'F' \(letter\) is not one of the options"),
    (lambda rows, header: ([*rows[:6], [rows[2][0], *rows[6][1:]], *rows[7:]], header),
     r"my_usmle.csv:{6}: field 'link' duplicate id .* \(first on line {2}\)"),
    (lambda rows, header: ([*rows[:9], [*rows[9][:4], "  ", *rows[9][5:]], *rows[10:]], header),
     r"my_usmle.csv:{9}: field 'opc' is empty"),
])
def test_bad_rows_are_errors_naming_file_line_and_field(config_dir, capsys, edit, message):
    import re

    rows, header = edit(_rows(), HEADER)
    decl, path = _write(config_dir, rows, header)
    assert main(["benchmark", "add", str(decl)]) == 2
    err = capsys.readouterr().err.strip()
    message = message.format(*_start_lines(path))  # rows span lines: the line each row starts on
    assert re.search(message, err) and len(err.splitlines()) == 1, err
    assert "my_usmle" not in data.names()


def test_lenient_skips_and_counts_bad_rows(config_dir, capsys):
    rows = _rows()
    rows[3][7] = "F"
    rows[9][4] = ""
    decl, path = _write(config_dir, rows)
    assert main(["benchmark", "add", str(decl), "--lenient", "--json"]) == 0
    added = json.loads(capsys.readouterr().out)
    assert added["items"] == 28 and added["skipped"] == 2
    assert added["skipped_rows"][0].startswith(f"{path}:{_start_lines(path)[3]}: field 'answer_idx'")
    assert len(data.load("my_usmle")) == 28


@pytest.mark.parametrize("declaration,message", [
    (DECLARATION.replace("name: my_usmle", "name: medmcqa"), "'medmcqa' is a built-in benchmark"),
    (DECLARATION + "answer_fmt: letter\n", "unknown key 'answer_fmt'"),
    (DECLARATION.replace("answer_format: letter", "answer_format: idx"), r"answer_format: expected"),
    (DECLARATION.replace("source: {{format: csv, path: {path}}}", "source: {{hub: nobody/no-such-set, split: test}}"),
     r"source.hub 'nobody/no-such-set' .* cannot be loaded: .*no network"),
])
def test_bad_declarations_are_one_line_errors(config_dir, capsys, declaration, message):
    import re

    decl, _ = _write(config_dir, _rows(8), declaration=declaration)
    assert main(["benchmark", "add", str(decl)]) == 2
    err = capsys.readouterr().err.strip()
    assert re.search(message, err) and len(err.splitlines()) == 1 and str(decl) in err, err


def test_answer_formats_and_option_columns(tmp_path):
    from medr2_hooks.data import declared

    rows = [{"q": "Which?", "opts": {"A": "x", "B": "y", "C": "z"}, "a": "y"},
            {"q": "Which now?", "opts": {"A": "u", "B": "v", "C": "w"}, "a": "w"}]
    path = tmp_path / "q.json"
    path.write_text(json.dumps(rows))
    base = {"name": "tiny", "title": "t", "source": {"format": "json", "path": str(path)},
            "fields": {"question": "q", "options": "opts", "answer": "a"}, "answer_format": "text", "n_demos": 0}
    loaded = declared.load(declared.parse(base, "tiny.yaml"))
    assert [(r.id, r.answer) for r in loaded.records] == [("1", "B"), ("2", "C")]
    lines = tmp_path / "q.jsonl"
    lines.write_text("".join(json.dumps({"q": r["q"], "opts": list(r["opts"].values()), "a": i + 1}) + "\n"
                             for i, r in enumerate(rows)))
    index1 = {**base, "source": {"format": "jsonl", "path": str(lines)}, "answer_format": "index1"}
    assert [r.answer for r in declared.load(declared.parse(index1, "tiny.yaml")).records] == ["A", "B"]


@pytest.mark.slow
def test_eval_runs_direct_vanilla_rag_and_medr2_on_a_declared_csv(config_dir):
    """The issue's 'done when': `medr2 eval --tasks <name>_direct,<name>_vanilla_rag,<name>_medr2 --limit 3`."""
    import os
    import subprocess
    import sys

    decl, _ = _write(config_dir, _rows())
    assert main(["benchmark", "add", str(decl)]) == 0
    results = config_dir / "results"
    env = {**os.environ, "MEDR2_RESULTS_DIR": str(results), "WANDB_MODE": "offline"}
    tasks = ["my_usmle_direct", "my_usmle_vanilla_rag", "my_usmle_medr2"]
    done = subprocess.run([sys.executable, "-m", "medr2_hooks.cli.main", "eval", "--tasks", ",".join(tasks),
                           "--limit", "3", "--no_wandb", "--run_name", "mine", "--metadata", json.dumps(SMALL)],
                          env=env, capture_output=True,
                          text=True, timeout=3000)
    assert done.returncode == 0, done.stderr[-6000:]
    record = json.loads((results / "runs" / "mine" / "run.json").read_text())
    for task in tasks:
        assert 0.0 <= record["results"][task]["acc,none"] <= 1.0
        assert record["n_samples"][task]["effective"] == 3
    assert record["prepass"]["my_usmle_medr2"]["questions"] == 3
    packs = record["prepass"]["my_usmle_medr2"]["packs"]["packs"]
    assert "EXPLANATION" not in open(packs, encoding="utf-8").read()


@pytest.mark.parametrize("benchmark", ["medqa_usmle", "medmcqa", "pubmedqa"])
def test_declared_tasks_are_the_shipped_tasks_of_another_benchmark(benchmark, config_dir, capsys):
    """A declared benchmark's tasks come from the same registry as a shipped benchmark's: the same files, with
    the benchmark's name and the templates' folder the only differences; and they follow the registry when it
    changes (a task file that no longer matches is rewritten, never left stale)."""
    from medr2_hooks import settings
    from medr2_hooks.lmeval.registry import task_manager
    from medr2_hooks.lmeval.usertasks import user_tasks_dir

    decl, _ = _write(config_dir, _rows())
    assert main(["benchmark", "add", str(decl), "--json"]) == 0
    capsys.readouterr()
    shipped = sorted((settings.tasks_dir() / benchmark).glob("*.yaml"))
    for path in shipped:
        mine = user_tasks_dir() / "my_usmle" / path.name.replace(benchmark, "my_usmle")
        text = mine.read_text().split("\n", 1)[1]  # after the "made by" line
        assert text == path.read_text().replace(benchmark, "my_usmle").replace(
            "../templates/", f"{settings.tasks_dir() / 'templates'}/"), path.name
    assert len(list((user_tasks_dir() / "my_usmle").glob("*.yaml"))) == len(shipped)
    stale = user_tasks_dir() / "my_usmle" / "my_usmle_medr2.yaml"
    stale.write_text(stale.read_text().replace("method: medr2", "method: medr2_cot"))
    gone = user_tasks_dir() / "my_usmle" / "my_usmle_gone.yaml"  # a task an older registry made
    gone.write_text(stale.read_text().split("\n", 1)[0] + "\ntask: my_usmle_gone\n")
    assert "my_usmle_medr2" in task_manager().all_tasks and "my_usmle_gone" not in task_manager().all_tasks
    assert "method: medr2\n" in stale.read_text()
