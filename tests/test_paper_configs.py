"""Paper experiments that mean what they say on GPUs: explicit roles for every target, YaRN only where the
paper needs it (each test failed on 44f83a9)."""

from __future__ import annotations

import csv

import pytest

from medr2_hooks.config import ConfigError
from medr2_hooks.experiments.config import Experiment, ModelSpec, load_experiment
from medr2_hooks.experiments.expand import expand, pretrained_of

PAPER = ("table2", "table8", "table9", "table10", "figure4")


@pytest.mark.parametrize("name", PAPER)
def test_no_paper_run_judges_with_an_embedded_model(name):
    runs = [r for r in expand(load_experiment(name)) if "roles" in r.resolved]
    assert runs
    for run in runs:
        models = run.resolved["roles"]  # the roles the run's method calls
        assert not [m for m in models.values() if m.startswith("embedded:")], run.name
        if "reference" in models:
            assert models["reference"] == "Qwen/Qwen2.5-72B-Instruct"
        if "proxy" in models:
            family = "Qwen/Qwen2.5-1.5B" if run.model.startswith("qwen") else "princeton-nlp/Sheared-LLaMA-1.3B"
            assert models["proxy"] == family
        assert {"unit", "coarse_k", "window"} <= set(run.resolved)
    assert any({"reference", "proxy"} <= set(r.resolved["roles"]) for r in runs)  # Med-R²'s rows judge


def test_a_gpu_target_with_embedded_roles_is_an_error_unless_allowed():
    target = ModelSpec(name="llama3.1-8b", model="vllm", model_args="pretrained=meta-llama/Llama-3.1-8B-Instruct")
    exp = Experiment(name="x", models=[target], methods=["medr2"], benchmarks=["medqa_usmle"])
    # the pre-pass's own rule, applied before launch: every embedded part is named
    wanted = (r"experiment x: llama3.1-8b medr2: the target meta-llama/Llama-3.1-8B-Instruct is not an embedded model, "
              r"but role classifier \(embedded:gemma-270m\).*the packing tokenizer.*allow_embedded_roles: true in the "
              r"experiment")
    with pytest.raises(ConfigError, match=wanted):
        expand(exp)
    allowed = Experiment(name="x", models=[target], methods=["medr2"], benchmarks=["medqa_usmle"],
                         allow_embedded_roles=True)
    assert expand(allowed)[0].resolved["roles"]["cot"] == "embedded:gemma-270m"


def test_yarn_applies_above_32k_only():
    runs = [r for r in expand(load_experiment("table9")) if r.model.startswith("qwen")]
    for run in runs:
        assert ("rope_scaling" in run.model_args) == (run.window > 32768), run.name


def test_yarn_model_args_reach_vllm_whole():
    """lm-eval splits model_args on every comma, which cuts the JSON of hf_overrides apart; ours keeps it whole."""
    from medr2_hooks.lmeval.runner import resolve_model

    run = next(r for r in expand(load_experiment("table9")) if r.model == "qwen2.5-32b" and r.window == 131072)
    model, args = resolve_model(run.lm_model, run.model_args)
    assert model == "vllm" and args["tensor_parallel_size"] == 2 and args["max_length"] == 131072
    assert args["hf_overrides"] == {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                     "original_max_position_embeddings": 32768}}


PAPER_TABLES = {"2": "table2", "8": "table8", "9": "table9", "10": "table10"}


def test_every_numeric_paper_cell_has_a_run():
    from medr2_hooks.experiments.report import PAPER_NUMBERS

    cells = {(load_experiment(name).paper_table, r.model, r.method, r.benchmark, r.window)
             for name in PAPER_TABLES.values() for r in expand(load_experiment(name))}
    with open(PAPER_NUMBERS, encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["method"] != "reported" and r["benchmark"] != "average"]
    assert len(rows) > 700
    missing = [r for r in rows if (r["table"], r["model"].lower(), r["method"], r["benchmark"], int(r["window"]))
               not in cells]
    assert missing == []


def test_table2_fine_tuning_is_three_checkpoints_per_target():
    from medr2_hooks.finetune.recipe import load_recipe

    runs = expand(load_experiment("table2"))
    assert len({r.model for r in runs}) == 6
    tuned = [r for r in runs if r.method == "finetune"]
    assert len(tuned) == 30
    for model in {r.model for r in runs}:
        by_bench = {r.benchmark: r.resolved for r in tuned if r.model == model}
        assert len({v["checkpoint"] for v in by_bench.values()}) == 3
        # cross-dataset: PubMedQA and MMLU-Med are scored on the MedMCQA checkpoint
        assert by_bench["pubmedqa"]["checkpoint"] == by_bench["mmlu_med"]["checkpoint"] == \
            by_bench["medmcqa"]["checkpoint"]
        assert f"pretrained={by_bench['medqa_usmle']['checkpoint']}" in next(
            r.model_args for r in tuned if r.model == model and r.benchmark == "medqa_usmle")
        assert f"--model {by_bench['medmcqa']['base_model']}" in by_bench["medmcqa"]["train"]
    usmle = load_recipe("paper_medqa_usmle_within").train[0]
    assert (usmle.source, usmle.split) == ("medqa_release", "train")  # the 5-option release, as evaluated


def test_a_finetune_cell_without_a_checkpoint_is_an_error():
    target = ModelSpec(name="m", model="vllm", model_args="pretrained=org/m")
    with pytest.raises(ValueError, match="no checkpoint for the finetune cells of pubmedqa"):
        Experiment(name="x", models=[target], methods=["finetune"], benchmarks=["medmcqa", "pubmedqa"],
                   finetune={"medmcqa": "paper_medmcqa_within"})
    with pytest.raises(ValueError, match="does not list medmcqa under evaluate"):
        Experiment(name="x", models=[target], methods=["finetune"], benchmarks=["medmcqa"],
                   finetune={"medmcqa": "paper_medqa_usmle_within"})


def test_a_sweep_refuses_an_untrained_checkpoint_and_says_how_to_train_it(tmp_path):
    from medr2_hooks.errors import Medr2Error
    from medr2_hooks.experiments.sweep import execute

    target = ModelSpec(name="m", model="vllm", model_args="pretrained=org/m", checkpoints=str(tmp_path))
    exp = Experiment(name="x", models=[target], methods=["finetune"], benchmarks=["medmcqa"],
                     finetune={"medmcqa": "paper_medmcqa_within"}, scoring="generative")
    with pytest.raises(Medr2Error, match="train it first: accelerate launch .* paper_medmcqa_within --model org/m"):
        execute(expand(exp)[0], wandb=False)
    # one rule (issue 40.3): a letter-scored cell cannot read a checkpoint trained to write its answer
    letters = Experiment(name="x", models=[target], methods=["finetune"], benchmarks=["medmcqa"],
                         finetune={"medmcqa": "paper_medmcqa_within"})
    with pytest.raises(ConfigError, match="trains answer_format generative, chat false, but its cells are read as "
                                          "answer_format letters"):
        expand(letters)


@pytest.mark.slow
def test_each_table9_window_packs_more_evidence_than_the_one_below(data_root):
    """Model-free: Table 9's paper setting on the textbook index — passages, a coarse set sized per window to 3x
    its evidence budget (experiments/budget.py), in retrieval order — packed per window with a target tokenizer."""
    import numpy as np
    from transformers import AutoTokenizer

    from medr2_hooks import data
    from medr2_hooks.apply.pack import pack
    from medr2_hooks.experiments.budget import size_candidates
    from medr2_hooks.experiments.config import WINDOWS
    from medr2_hooks.llm.embedded import resolve
    from medr2_hooks.retrieve.build import ensure_index
    from medr2_hooks.retrieve.searcher import Searcher

    exp = load_experiment("table9")
    assert exp.method_override["unit"] == "passage" and exp.candidate_ratio == 3.0
    searcher = Searcher.open(ensure_index("textbooks_demo", log=lambda *_: None))
    sizes = {w: size_candidates("textbooks_demo", "passage", w, 0.5, exp.candidate_ratio) for w in WINDOWS}
    assert all(sizes[a] < sizes[b] for a, b in zip(WINDOWS, WINDOWS[1:]))  # S^c grows with the window
    tok = AutoTokenizer.from_pretrained(resolve("embedded:gemma-270m"))
    questions = data.pools("medqa_usmle").eval[:20]
    hits = searcher.search([q.question for q in questions], k=max(sizes.values()), unit="passage")
    packed = []
    for q, found in zip(questions, hits):
        ev = [len(ids) for ids in tok([h.text for h in found], add_special_tokens=False)["input_ids"]]
        q_tokens = len(tok(q.question)["input_ids"])
        packed.append([pack(q_tokens, ev[: sizes[w]], [], w, 0.5).tokens for w in WINDOWS])
    increasing = sum(all(a < b for a, b in zip(row, row[1:])) for row in packed)
    print("mean packed tokens per window:", dict(zip(WINDOWS, np.mean(packed, axis=0).round().astype(int).tolist())))
    assert increasing >= 18, f"only {increasing} of 20 questions pack more at every larger window"


# -- dress rehearsal -----------------------------------------------------------------------------------------------
def test_a_rehearsal_keeps_the_grid_and_serves_every_served_role_on_a_stand_in():
    from medr2_hooks.experiments.rehearse import CONTEXT, Plan, rehearsal

    paper = load_experiment("table9")
    exp = rehearsal(paper, Plan(limit=2, window_cap=8192))
    runs = expand(exp)
    paper_runs = [r for r in expand(paper) if r.benchmark == "medqa_usmle"]
    assert [(r.model, r.method, r.window) for r in runs] == [(r.model, r.method, r.window) for r in paper_runs]
    assert exp.name == "table9_rehearsal" and all(r.limit == 2 for r in runs)
    stand_in = {m.name: m.model if m.model.startswith("embedded:") else pretrained_of(m) for m in exp.models}
    for run in runs:
        is_served = run.lm_model == "local-completions"  # the 70B target: served, through its stand-in's server
        assert is_served == (run.model == "llama3.1-70b")
        assert is_served or (run.lm_model.startswith("embedded:") and run.model_args == "")
        override = run.metadata.get("method_override")
        if override is None:
            continue
        served = [override["llm"], *override["roles"].values()]
        assert all(s["backend"] == "openai" and s["base_url"].startswith("http://127.0.0.1:") for s in served)
        # the stand-in's context, CPU cap
        assert override["window"] == min(run.window, CONTEXT[stand_in[run.model]], 8192)
        assert "index" not in override and "coarse" not in override and "target_tokenizer" not in override
        # a target's CoT server is played by the target's own stand-in; the judges by the instruction-tuned one
        assert override["roles"]["cot"]["model"] == stand_in[run.model]
        assert override["llm"]["model"] == "embedded:smollm2-135m-instruct"
    assert {r.lm_model for r in runs} == {"embedded:gemma-270m", "embedded:smollm2-135m-instruct", "local-completions"}
    assert exp.rehearsal["windows_capped"] == [16384, 32768, 65536, 131072]
    assert expand(rehearsal(paper, Plan()))[-1].resolved["window"] == 4096  # the default CPU cap
    two = rehearsal(paper, Plan(models=("llama3.1-8b", "qwen2.5-14b")))
    assert [m.name for m in two.models] == ["llama3.1-8b", "qwen2.5-14b"] and len(expand(two)) == 24


def test_a_rehearsal_report_says_so_on_its_first_line_and_regenerates_from_its_record(tmp_path, monkeypatch):
    import json

    from medr2_hooks.experiments.rehearse import Plan, rehearsal
    from medr2_hooks.experiments.report import render

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    exp = rehearsal(load_experiment("table10"), Plan(limit=1))
    (tmp_path / exp.name).mkdir()
    (tmp_path / exp.name / "experiment.json").write_text(json.dumps(exp.to_json()))
    again = load_experiment("table10_rehearsal")
    assert again == exp and [r.name for r in expand(again)] == [r.name for r in expand(exp)]
    first = (render(again) / "report.md").read_text().splitlines()[0]
    assert first.startswith("# REHEARSAL, not results: table10")
    with pytest.raises(ConfigError, match="already a rehearsal"):
        rehearsal(again, Plan())


@pytest.mark.slow
def test_a_rehearsal_run_reaches_its_roles_over_http(tmp_path):
    """``medr2 sweep table10 --rehearse``: the query reformulator row of a Qwen target classifies and reformulates
    through the served SmolLM2 stand-in (medr2 serve), as the GPU run would through vllm serve."""
    import json
    import os
    import subprocess
    import sys

    from medr2_hooks import settings

    # A stage cache of its own: with the user's, an earlier run of this test answers classify and reformulate from
    # disk, no role is called, and nothing would show that the calls go over HTTP. Models and indexes are shared.
    cache = tmp_path / "cache"
    cache.mkdir()
    for folder in ("models", "indexes"):
        if (settings.cache_dir() / folder).is_dir():
            (cache / folder).symlink_to(settings.cache_dir() / folder)
    results = tmp_path / "results"
    env = {**os.environ, "MEDR2_RESULTS_DIR": str(results), "MEDR2_CACHE_DIR": str(cache), "WANDB_MODE": "offline"}
    name = "table10_rehearsal__qwen2.5-7b__ablation_q__medqa_usmle__w4096__gen"
    done = subprocess.run([sys.executable, "-m", "medr2_hooks.cli.main", "sweep", "table10", "--rehearse", "--limit",
                           "1", "--port-offset", "7", "--no_wandb", "--run", name], env=env, capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-6000:]
    record = json.loads((results / "runs" / name / "run.json").read_text())
    usage = record["prepass"]["medqa_usmle_ablation_q_gen"]["usage"]
    served = usage["embedded:smollm2-135m-instruct@http://127.0.0.1:18142/v1"]
    assert served["calls"] > 0 and set(served["by_role"]) >= {"classifier", "reformulator"}
    assert record["prepass"]["medqa_usmle_ablation_q_gen"]["config"]["reformulate"] is True
    state = json.loads((results / "table10_rehearsal" / "sweep.json").read_text())
    assert state["runs"][name]["status"] == "done"
    assert json.loads((results / "table10_rehearsal" / "experiment.json").read_text())["rehearsal"]["of"] == "table10"


def test_table9_serves_its_70b_target_and_the_rehearsal_serves_its_stand_in():
    """Issue 34.3: a served target (lm-eval's local-completions against vllm serve) in a paper config; its
    rehearsal runs the same client against the stand-in's medr2 serve; a served target has no finetune cells."""
    from medr2_hooks.experiments.config import Experiment, ModelSpec, load_experiment
    from medr2_hooks.experiments.expand import expand
    from medr2_hooks.experiments.rehearse import GEMMA, Plan, rehearsal, servers_needed
    from medr2_hooks.lmeval.runner import resolve_model

    exp = load_experiment("table9")
    served = [r for r in expand(exp) if r.model == "llama3.1-70b" and r.window > 4096]  # 4K: Table 2's own runs
    assert served and all(r.lm_model == "local-completions" for r in served)
    assert all("base_url=http://localhost:8012/v1/completions" in r.model_args and
               f"max_length={r.window}" in r.model_args for r in served)
    rehearsed = rehearsal(exp, Plan(limit=1))
    target = next(m for m in rehearsed.models if m.name == "llama3.1-70b")
    assert target.model == "local-completions" and "base_url=http://127.0.0.1:18270/v1/completions" in target.model_args
    assert rehearsed.rehearsal["models"]["llama3.1-70b"]["served"] is True and GEMMA in servers_needed(rehearsed)
    model, args = resolve_model(target.model, target.model_args)
    assert model == "local-completions" and not args["tokenizer"].startswith("embedded:")
    with pytest.raises(ValueError, match="served target"):
        Experiment("x", [ModelSpec("m", model="local-completions", model_args="model=m,base_url=http://h/v1")],
                   ["finetune"], ["medqa_usmle"], finetune={})
