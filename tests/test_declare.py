"""Issue 42.1: a pipeline's stages are declared once (medr2_hooks.pipeline.declare); the method registry's step list,
the roles a method loads, the run and the cost estimate all read that one declaration. A toy stage added to the
declaration shows up in each of them, and a stage that runs undeclared is an error."""

from __future__ import annotations

import dataclasses

import pytest

from medr2_hooks import methods
from medr2_hooks.pipeline import declare
from medr2_hooks.pipeline.config import MethodConfig
from medr2_hooks.pipeline.declare import Stage, all_roles, pipeline

TOY = Stage("toy_grader", "rerank", ("leveler",), "selected evidence", "a toy grade per document", shape=float)


@pytest.fixture
def with_toy(monkeypatch):
    """medr2's declaration with the toy stage added before packing (removed again when the test ends)."""
    medr2 = pipeline("medr2")
    stages = medr2.stages[:-1] + (TOY,) + medr2.stages[-1:]
    monkeypatch.setitem(declare._REGISTRY, "medr2", dataclasses.replace(medr2, stages=stages))
    return TOY


def test_every_declared_stage_names_real_roles_and_steps():
    assert set(declare.known()) == {"medr2", "llm_amt", "hyde"}  # the pipelines the method registry names
    for name in declare.known():
        p = pipeline(name)
        assert p.name == name and callable(p.prepare)
        for stage in p.stages:
            assert set(stage.roles) <= set(all_roles()), (name, stage.name)
            assert stage.step in declare.EBM_STEPS + p.steps_of_its_own + (None,)
    # the registry's lists are the declaration read under each method's settings
    assert methods.method("vanilla_rag").stages() == ("retrieve", "apply")
    assert methods.method("llm_amt").stages() == ("augment", "retrieve", "rerank", "refine", "cot", "apply")
    assert MethodConfig(pipeline="llm_amt").roles_used() == ("augmenter", "relevance", "usefulness", "cot")


def test_a_toy_stage_is_one_declaration_the_registry_roles_run_and_estimate_all_see(with_toy, tmp_path):
    from medr2_hooks.cache import StageCache
    from medr2_hooks.experiments.cost import uncounted
    from medr2_hooks.pipeline.toolbox import StageToolbox

    # the registry's step list and the roles the run loads: vanilla RAG now reranks, with the leveler's model
    assert methods.method("vanilla_rag").stages() == ("retrieve", "rerank", "apply")
    vanilla = MethodConfig.from_dict(methods.method("vanilla_rag").variant())
    assert vanilla.roles_used() == ("leveler",)
    # the run may time and cache it (without the declaration it may not: below)
    m = StageToolbox(vanilla, cache=StageCache(tmp_path / "stages.sqlite"))
    with m.stage("toy_grader"):
        pass
    assert "toy_grader" in m.timings
    # a stage declared to call a model that the counted run never asked is an error: declaration and code disagree
    with pytest.raises(RuntimeError, match="declares stage.*toy_grader.*asked no model there"):
        uncounted(vanilla, [], demos=False)


def test_a_toy_stage_that_runs_is_counted_by_the_dry_run_with_no_change_to_the_estimate(with_toy, tmp_path,
                                                                                       monkeypatch):
    """Issue 42.2: the dry-run runs the pipeline's own stages, so a stage added to the code and its declaration (here:
    the leveler grading each ranked document once more) is in the estimate, counted as it runs; removed,
    it is gone. Nothing in medr2_hooks/experiments changes."""
    from medr2_hooks.experiments.cost import run_lines
    from medr2_hooks.llm.closed_set import label_distribution
    from medr2_hooks.pipeline.toolbox import StageToolbox
    from pipeline_helpers import one_run

    plan = one_run(tmp_path, "vanilla_rag", "{retrievers: [dense], retrieve_k: 4, coarse_k: 3}")

    def graded(m, questions, labels, refs, coarse):  # the toy stage: the leveler's yes/no on each ranked document
        ranked = fine(m, questions, labels, refs, coarse)
        m.cached("toy_grader", [h["text"] for hits in ranked for h in hits], {"model": m.ids["leveler"]},
                 lambda texts: [float(p[0]) for p in label_distribution(
                     m.llm("leveler"), [f"{t}\nIs this sound evidence? Answer:" for t in texts], ["yes", "no"],
                     role="toy")])
        return ranked

    fine = StageToolbox.fine
    monkeypatch.setattr(StageToolbox, "fine", graded)
    lines, assumptions = run_lines(plan)
    toy = [line for line in lines if line.stage == "toy_grader"]
    # every question and demonstration, the 3 documents of S^c each: one request a document (hf: one pass a menu)
    asked = 3 * (assumptions["items"] + assumptions["demonstrations"])
    assert {line.role for line in toy} == {"leveler"}
    assert sum(line.items for line in toy) == sum(line.requests for line in toy) == asked
    assert sum(line.prompt_tokens for line in toy) > 20 * asked
    monkeypatch.undo()  # the stage and its declaration removed: vanilla RAG calls no model again
    assert not [line for line in run_lines(plan)[0] if line.phase == "prepass"]


def test_a_stage_that_runs_undeclared_is_an_error(tmp_path):
    from medr2_hooks.cache import StageCache
    from medr2_hooks.pipeline.toolbox import StageToolbox

    m = StageToolbox(MethodConfig(), cache=StageCache(tmp_path / "stages.sqlite"))
    with pytest.raises(RuntimeError, match="ran stage 'toy_grader', which it does not declare"):
        with m.stage("toy_grader"):
            pass
    vanilla = StageToolbox(MethodConfig.from_dict(methods.method("vanilla_rag").variant()),
                    cache=StageCache(tmp_path / "stages.sqlite"))
    with pytest.raises(RuntimeError, match="does not declare for method 'vanilla_rag'"):
        with vanilla.stage("evidence_level"):  # declared, but not under vanilla RAG's settings
            pass


def test_each_methods_estimate_counts_every_declared_stage_that_calls_a_model(tmp_path):
    """Every method of the registry, counted on two MedQA-USMLE questions: the dry-run's lines cover its pipeline's
    declared model-calling stages (uncounted() raises otherwise), and name no stage the declaration lacks."""
    from medr2_hooks.experiments.config import load_experiment
    from medr2_hooks.experiments.cost import run_lines
    from medr2_hooks.experiments.expand import expand
    from medr2_hooks.retrieve.build import ensure_index

    ensure_index("textbooks_demo")
    retrieval = [n for n, m in methods.METHODS.items() if m.retrieval]
    path = tmp_path / "all_methods.yaml"
    path.write_text("name: all_methods\nmodels: [{name: gemma-270m, model: 'embedded:gemma-270m'}]\n"
                    f"methods: [{', '.join(retrieval)}]\nbenchmarks: [medqa_usmle]\nlimit: 2\n"
                    "method_override: {retrievers: [dense], retrieve_k: 4, coarse_k: 3, iterations: 2, max_demos: 1}\n")
    runs = expand(load_experiment(str(path)))
    assert {r.method for r in runs} == set(retrieval)
    for run in runs:
        lines, _ = run_lines(run)  # raises when a declared stage is not counted
        cfg = MethodConfig.from_dict(methods.method(run.method).variant() | {"retrievers": ["dense"]})
        declared = {s.name for s in pipeline(cfg.pipeline).active(cfg)}
        counted = {line.stage.removesuffix("_answer") for line in lines if line.phase == "prepass"}
        assert counted <= declared, (run.method, counted - declared)
