"""Experiment configs: expansion counts per table, validation, cache-friendly order, resumable sweeps with
recorded failures, and the paired statistics against hand-computed values."""

from __future__ import annotations

import json

import pytest

from medr2_hooks.config import ConfigError
from medr2_hooks.experiments.config import Experiment, ModelSpec, load_experiment
from medr2_hooks.experiments.expand import expand
from medr2_hooks.settings import REPO_ROOT

REPO_RESULTS = REPO_ROOT / "results"


@pytest.mark.parametrize("name, runs", [
    ("table2", 6 * 5 * 6), ("table2_embedded", 6), ("table8", 6 * 5 * 4), ("table9", 4 * 5 * 2 * 6),
    ("table9_embedded", 6), ("table10", 6 * 9 * 5), ("table10_embedded", 9), ("figure4", 6 * 5),
])
def test_each_config_expands_to_its_number_of_runs(name, runs):
    expanded = expand(load_experiment(name))
    assert len(expanded) == runs and len({r.name for r in expanded}) == runs


def test_unknown_names_fail_before_any_run_listing_valid_values(tmp_path):
    with pytest.raises(ValueError, match="unknown method 'medr3'; valid methods: direct, vanilla_rag"):
        Experiment("x", [ModelSpec("m")], ["medr3"], ["medqa_usmle"])
    with pytest.raises(ValueError, match="unknown window 5000; valid windows: 4096"):
        Experiment("x", [ModelSpec("m")], ["direct"], ["medqa_usmle"], windows=[5000])
    with pytest.raises(ValueError, match="unknown benchmark 'medqa'"):
        Experiment("x", [ModelSpec("m")], ["direct"], ["medqa"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodels: [{name: m}]\nmethods: [direct]\nbenchmarks: [medqa_usmle]\nwindow: [4096]\n")
    with pytest.raises(ConfigError, match="unknown key 'window'"):
        load_experiment(str(bad))


def test_ablations_switch_stages_and_windows_of_a_model_run_together():
    runs = expand(load_experiment("table10_embedded"))
    by_method = {r.method: r for r in runs}
    assert by_method["ablation_qc"].task == "medqa_usmle_ablation_qc_gen"  # the registry's task: q and c on, r off
    assert by_method["ablation_qc"].resolved["stages"] == ["classify", "reformulate", "retrieve", "cot",
                                                           "loop", "apply"]
    assert by_method["ablation_qrc"].task == "medqa_usmle_ablation_qrc_gen" and by_method["direct"].metadata == {}
    assert by_method["vanilla_rag"].task == "medqa_usmle_vanilla_rag_gen"
    t9 = [r for r in expand(load_experiment("table9")) if r.model == "qwen2.5-14b" and r.benchmark == "pubmedqa"]
    assert [(r.method, r.window) for r in t9] == [(m, w) for m in ("direct", "medr2")
                                                  for w in (4096, 8192, 16384, 32768, 65536, 131072)]
    assert t9[-1].metadata["method_override"]["window"] == 131072 and "max_length=131072" in t9[-1].model_args
    assert "yarn" in t9[-1].model_args


def test_half_finished_sweep_resumes_and_records_failures(tmp_path, monkeypatch):
    from medr2_hooks.experiments import sweep

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    runs = expand(load_experiment("table10_embedded"))[:4]
    executed = []

    def execute(run, wandb):  # stands in for lm-eval: writes the run record the real runner writes
        executed.append(run.name)
        if run.method == "ablation_q" and len(executed) < 5:
            raise RuntimeError("out of memory")
        out = sweep.run_dir(run)
        out.mkdir(parents=True)
        (out / "run.json").write_text(json.dumps({"results": {run.task: {"acc,none": 0.5}}}))

    first = sweep.sweep("t", runs[:2], execute_run=execute, log=lambda *_: None)  # killed after two runs
    assert [e["status"] for e in first["runs"].values()] == ["done", "done"]
    second = sweep.sweep("t", runs, execute_run=execute, log=lambda *_: None)
    statuses = {n.split("__")[2]: e["status"] for n, e in second["runs"].items()}
    assert statuses == {"direct": "skipped", "vanilla_rag": "skipped", "ablation_q": "failed", "ablation_r": "done"}
    assert "out of memory" in second["runs"][runs[2].name]["error"]
    assert json.loads((tmp_path / "t" / "sweep.json").read_text()) == second
    third = sweep.sweep("t", runs, execute_run=execute, log=lambda *_: None)
    assert [e["status"] for e in third["runs"].values()] == ["skipped", "skipped", "done", "skipped"]


def test_one_run_of_a_sweep_keeps_every_other_runs_state(tmp_path, monkeypatch):
    """Issue 31.8: `medr2 sweep CONFIG --run NAME` (how `wandb agent` runs it) rewrote sweep.json with its one run;
    now each run updates only its entry, under a lock, also when agents write at once."""
    from concurrent.futures import ThreadPoolExecutor

    from medr2_hooks.experiments import sweep

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    runs = expand(load_experiment("table10_embedded"))

    def execute(run, wandb):
        sweep.run_dir(run).mkdir(parents=True)
        (sweep.run_dir(run) / "run.json").write_text(json.dumps({"results": {}}))

    sweep.sweep("t", runs[:3], execute_run=execute, log=lambda *_: None)
    sweep.sweep("t", [runs[5]], execute_run=execute, log=lambda *_: None)  # `--run <runs[5]>`
    with ThreadPoolExecutor(4) as pool:  # four agents at once
        list(pool.map(lambda r: sweep.sweep("t", [r], execute_run=execute, log=lambda *_: None), runs[6:]))
    state = json.loads((tmp_path / "t" / "sweep.json").read_text())
    assert set(state["runs"]) == {r.name for r in runs[:3] + runs[5:]}


def test_a_damaged_run_summary_is_named_and_counts_as_missing(tmp_path, monkeypatch, caplog):
    """Issue 31.9: a corrupt results/<exp>/runs/<run>.json crashed `medr2 report` with a traceback naming no file,
    while `medr2 sweep` counted the run as done and skipped it."""
    import logging

    from medr2_hooks.experiments import sweep
    from medr2_hooks.experiments.report import render

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    exp = load_experiment("table10_embedded")
    run = expand(exp)[0]
    path = sweep.summary_path(run)
    path.parent.mkdir(parents=True)
    path.write_text('{"summary": {"score": 40.0, "items": {"a"')  # cut short
    with caplog.at_level(logging.WARNING):
        assert sweep.has_results(run) is None
        out = render(exp, force=True)
    assert str(path) in caplog.text and "treated as missing" in caplog.text
    assert "| gemma-270m | 4096 | direct | generative | — | — |" in (out / "report.md").read_text()


def test_wandb_sweep_spec_lists_the_same_runs():
    from medr2_hooks.experiments.sweep import wandb_sweep_spec

    runs = expand(load_experiment("table9_embedded"))
    spec = wandb_sweep_spec("table9_embedded", "experiments/table9_embedded.yaml", runs)
    assert spec["parameters"]["run"]["values"] == [r.name for r in runs] and spec["method"] == "grid"
    # an agent's run is a sweep run: group = the experiment, tagged as the report run is (medr2 report --wandb)
    assert spec["command"][:3] == ["medr2", "sweep", "experiments/table9_embedded.yaml"]
    assert all(r.experiment == "table9_embedded" and r.tags[0] == "experiment:table9_embedded" for r in runs)


def test_mcnemar_and_bootstrap_against_hand_computed_values():
    from medr2_hooks.stats import mcnemar, paired_bootstrap

    a = [1, 1, 0, 0, 1, 0, 0, 0, 1, 0]
    b = [1, 0, 1, 1, 1, 1, 1, 0, 1, 1]
    # discordant: b01 = 5 (items 3,4,6,7,10), b10 = 1 (item 2); p = 2 * (C(6,0) + C(6,1)) / 2^6 = 14/64
    assert mcnemar(a, b) == {"b01": 5, "b10": 1, "p": pytest.approx(14 / 64)}
    assert mcnemar(a, a)["p"] == 1.0
    ci = paired_bootstrap(a, b, n=4000, seed=1)
    assert ci["diff"] == pytest.approx(0.4) and ci["low"] < 0.4 < ci["high"]
    assert paired_bootstrap(a, a)["low"] == paired_bootstrap(a, a)["high"] == 0.0
    with pytest.raises(ValueError, match="paired scores"):
        mcnemar([1, 0], [1])


def test_paper_numbers_recompute_every_printed_average_and_list_the_errata():
    from medr2_hooks.experiments.report import paper_table

    tables = {t: paper_table(t) for t in ("2", "8", "9", "10")}
    assert {t: len(cells) for t, (cells, _) in tables.items()} == {"2": 37 * 6, "8": 37 * 5, "9": 48 * 6, "10": 54 * 6}
    errata = [(e["table"], e["model"], e["method"], e["window"]) for _, errs in tables.values() for e in errs]
    assert errata == [("8", "DeepSeek-V3", "reported", 4096), ("8", "Qwen2.5-7B", "medr2", 4096),
                      ("9", "Qwen2.5-32B", "direct", 8192), ("10", "LLaMA3.1-8B", "ablation_r", 4096)]
    cells = {(c["model"], c["method"], c["benchmark"]): float(c["value"]) for c in tables["10"][0]}
    assert cells[("LLaMA3.1-70B", "medr2", "medqa_usmle")] == 86.37  # spot check against the paper text


def _fake_run(run, correct: list[int]):
    """A finished run's files as medr2 eval writes them (run.json + a samples file), with given per-item scores."""
    from medr2_hooks.experiments.sweep import run_dir

    out = run_dir(run)
    (out / "model").mkdir(parents=True)
    acc = sum(correct) / len(correct)
    (out / "run.json").write_text(json.dumps({"results": {run.task: {"acc,none": acc}}, "wall_seconds": 12.5}))
    (out / "model" / f"samples_{run.task}_2026.jsonl").write_text(
        "".join(json.dumps({"doc": {"id": f"q{i}"}, "acc": float(c)}) + "\n" for i, c in enumerate(correct)))


def test_report_marks_missing_cells_and_computes_paired_statistics(tmp_path, monkeypatch):
    from medr2_hooks.experiments.report import render

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    exp = load_experiment("table10_embedded")
    runs = {r.method: r for r in expand(exp)}
    _fake_run(runs["direct"], [1, 1, 0, 0, 1, 0, 0, 0, 1, 0])
    _fake_run(runs["ablation_qrc"], [1, 0, 1, 1, 1, 1, 1, 0, 1, 1])
    _fake_run(runs["vanilla_rag"], [0] * 10)
    out = render(exp)
    report = (out / "report.md").read_text()
    assert "Runs with results: 3 of 9" in report
    assert "| gemma-270m | 4096 | ablation_qrc | generative | **80.00** | **80.00** |" in report
    assert "| gemma-270m | 4096 | direct | generative | <u>40.00</u> | <u>40.00</u> |" in report
    assert "| gemma-270m | 4096 | ablation_q | generative | — | — |" in report  # missing, never invented
    stats = {s["method"]: s for s in json.loads((out / "stats.json").read_text())}
    assert stats["ablation_qrc"]["diff"] == pytest.approx(40.0)
    assert stats["ablation_qrc"]["mcnemar_p"] == pytest.approx(14 / 64)
    assert "printed 56.34, cells give 56.39" in report
    assert (out / "methods.png").is_file() and (out / "accuracy_vs_cost.svg").is_file()
    rows = (out / "table.csv").read_text().splitlines()
    assert rows[0] == "model,window,method,scoring,medqa_usmle,average"
    assert "gemma-270m,4096,ablation_q,generative,," in rows
    files = lambda: {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}  # noqa: E731
    first = files()
    render(exp)  # the same results give the same files, figures included (no dates, fixed SVG ids)
    assert files() == first


def test_the_committed_run_summaries_regenerate_the_report_and_resume_the_sweep(tmp_path, monkeypatch):
    """Run folders stay out of git: on another machine the report and the sweep read the runs' summaries."""
    import shutil

    from medr2_hooks.errors import Medr2Error
    from medr2_hooks.experiments.report import render
    from medr2_hooks.experiments.sweep import sweep

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    exp = load_experiment("table10_embedded")
    runs = expand(exp)
    _fake_run(runs[0], [1, 1, 0, 0, 1, 0, 0, 0, 1, 0])
    _fake_run(runs[-1], [1, 0, 1, 1, 1, 1, 1, 0, 1, 1])
    out = render(exp)
    assert sorted(p.name for p in (out / "runs").iterdir()) == sorted(f"{r.name}.json" for r in (runs[0], runs[-1]))
    made = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    shutil.rmtree(tmp_path / "runs")  # a fresh clone: no run folders
    render(exp)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == made
    executed = []
    state = sweep(exp.name, runs, wandb=False, execute_run=lambda run, wandb: executed.append(run.name),
                  log=lambda m: None)
    assert executed == [r.name for r in runs[1:-1]]
    assert state["runs"][runs[0].name]["status"] == state["runs"][runs[-1].name]["status"] == "skipped"

    shutil.rmtree(out / "runs")  # a report made before summaries existed, on a machine without its run folders
    with pytest.raises(Medr2Error, match="holds 2 runs with results, but only 0"):
        render(exp)
    assert (out / "report.md").read_bytes() == made["report.md"]
    render(exp, force=True)
    assert "Runs with results: 0 of 9" in (out / "report.md").read_text()


def test_cache_reuse_is_all_windows_over_the_most_expensive_one():
    from medr2_hooks.experiments.report import cache_reuse

    runs = [r for r in expand(load_experiment("table9_embedded")) if r.method == "medr2"]
    done = {r.name: {"prepass_seconds": s} for r, s in zip(runs, [300.0, 12.0, 18.0])}
    (reuse,) = cache_reuse(runs, done)
    assert reuse["windows"] == 3 and reuse["ratio"] == pytest.approx(330 / 300)


def test_a_run_that_reused_packs_costs_no_pre_pass(tmp_path, monkeypatch):
    """Windows whose pre-pass is the same (a rehearsal's windows above its cap) reuse the packs: their run records
    carry the record of the run that made them, which must not be counted again."""
    from medr2_hooks.experiments.report import load_runs

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    runs = [r for r in expand(load_experiment("table9_embedded")) if r.method == "medr2"][:2]
    record = {"wall_seconds": 300.0, "usage": {"m": {"calls": 14, "prompt_tokens": 9000}},
              "packed_tokens": {"items": 1, "mean": 3815.0, "max": 3815}}
    for run, reused in zip(runs, (False, True)):
        _fake_run(run, [1, 0])
        path = tmp_path / "runs" / run.name / "run.json"
        made = json.loads(path.read_text())
        made.update(prepass={run.task: record}, prepared={run.task: {"reused": reused}})
        path.write_text(json.dumps(made))
    first, second = (load_runs(runs)[r.name] for r in runs)
    assert (first["prepass_seconds"], first["model_calls"], first["prompt_tokens"]) == (300.0, 14, 9000)
    assert (second["prepass_seconds"], second["model_calls"], second["packs_reused"]) == (0, 0, True)
    assert first["packed_tokens"] == second["packed_tokens"] == 3815.0


def test_report_refuses_a_subset_run_in_a_whole_benchmark_cell_unless_asked(tmp_path, monkeypatch):
    """Issue 35: a run that evaluated 3 of 2,535 items never fills a cell meant for the benchmark silently."""
    import dataclasses

    from medr2_hooks.errors import Medr2Error
    from medr2_hooks.experiments.report import render

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    exp = dataclasses.replace(load_experiment("table10_embedded"), limit=None)
    run = next(r for r in expand(exp) if r.method == "direct")
    _fake_run(run, [1, 0, 1])
    record = json.loads((tmp_path / "runs" / run.name / "run.json").read_text())
    record["subset"] = {run.task: {"items": 3, "of": 2535}}
    (tmp_path / "runs" / run.name / "run.json").write_text(json.dumps(record))
    with pytest.raises(Medr2Error, match=r"1 runs evaluated a subset: .*\(3 of 2535 items\).*--allow_subset"):
        render(exp)
    report = (render(exp, allow_subset=True) / "report.md").read_text()
    assert f"SUBSET RUNS (--allow_subset; their cells are not the benchmarks' scores): {run.name} (3 of 2535" in report


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in (REPO_RESULTS.glob("*/report.md"))))
def test_every_committed_report_regenerates_from_its_committed_summaries(folder, tmp_path, monkeypatch):
    """``medr2 report`` of each committed experiment (its recorded config where one is kept beside the report, else
    its YAML) finds as many runs with results in the committed summaries alone as the committed report shows: a
    fresh clone regenerates every number (pre-registry ablation summaries count under their old task name)."""
    import re
    import shutil

    from medr2_hooks.experiments.report import load_runs

    shutil.copytree(REPO_RESULTS / folder / "runs", tmp_path / folder / "runs")  # no run folders: summaries only
    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    recorded = REPO_RESULTS / folder / "experiment.json"
    if recorded.is_file():  # a rehearsal (found by name) or a twin run under an earlier config: as recorded
        shutil.copy(recorded, tmp_path / folder / "experiment.json")
    exp = load_experiment(str(tmp_path / folder / "experiment.json") if recorded.is_file() else folder)
    shown = re.search(r"^Runs with results: (\d+) of (\d+)", (REPO_RESULTS / folder / "report.md").read_text(), re.M)
    runs = expand(exp)
    assert (len(load_runs(runs)), len(runs)) == (int(shown[1]), int(shown[2]))


def test_an_inline_role_set_may_give_llm_alone_and_names_its_unknown_keys(tmp_path):
    """A model's inline roles ({llm: spec} without roles:) expand, as a role set does; a misspelt key is one line."""
    from medr2_hooks.config import ConfigError
    from medr2_hooks.experiments.config import load_experiment
    from medr2_hooks.experiments.expand import expand

    served = "{backend: openai, model: m, base_url: 'http://127.0.0.1:9/v1'}"
    path = tmp_path / "inline.yaml"
    path.write_text("name: inline\nmodels: [{name: g, model: 'embedded:gemma-270m', roles: {llm: %s}}]\n"
                    "methods: [medr2]\nbenchmarks: [medqa_usmle]\nlimit: 2\n" % served)
    (run,) = expand(load_experiment(str(path)))
    assert set(run.resolved["roles"].values()) == {"m"}
    path.write_text(path.read_text().replace("roles: {llm:", "roles: {lm:"))
    with pytest.raises(ConfigError, match="roles: unknown key 'lm'"):
        expand(load_experiment(str(path)))
