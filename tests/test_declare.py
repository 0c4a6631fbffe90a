"""Issue 42.1: a pipeline's stages are declared once (medr2_hooks.pipeline.declare); the method registry's step list,
the roles a method loads, the run and the cost estimate all read that one declaration. A toy stage added to the
declaration shows up in each of them, and a stage that runs undeclared is an error."""

from __future__ import annotations

import dataclasses

import pytest

from medr2_hooks import methods
from medr2_hooks.pipeline import declare
from medr2_hooks.pipeline.config import ROLES, MethodConfig
from medr2_hooks.pipeline.declare import Stage, pipeline
from medr2_hooks.pipeline.shapes import STAGE_SHAPES

TOY = Stage("toy_grader", "rerank", ("leveler",), "selected evidence", "a toy grade per document")


@pytest.fixture
def with_toy(monkeypatch):
    """medr2's declaration with the toy stage added before packing (removed again when the test ends)."""
    medr2 = pipeline("medr2")
    stages = medr2.stages[:-1] + (TOY,) + medr2.stages[-1:]
    monkeypatch.setitem(declare._REGISTRY, "medr2", dataclasses.replace(medr2, stages=stages))
    return TOY


def test_every_declared_stage_names_real_roles_and_steps():
    for name in declare.MODULES:
        p = pipeline(name)
        assert p.name == name and callable(p.prepare)
        for stage in p.stages:
            assert set(stage.roles) <= set(ROLES), (name, stage.name)
    # the registry's lists are the declaration read under each method's settings
    assert methods.method("vanilla_rag").stages() == ("retrieve", "apply")
    assert methods.method("llm_amt").stages() == ("augment", "retrieve", "rerank", "refine", "cot", "apply")
    assert MethodConfig(pipeline="llm_amt").roles_used() == ("cot", "relevance", "augmenter", "usefulness")


def test_a_toy_stage_is_one_declaration_the_registry_roles_run_and_estimate_all_see(with_toy, tmp_path):
    from medr2_hooks.cache import StageCache
    from medr2_hooks.experiments.cost import uncounted
    from medr2_hooks.pipeline.medr2 import MedR2

    # the registry's step list and the roles the run loads: vanilla RAG now reranks, with the leveler's model
    assert methods.method("vanilla_rag").stages() == ("retrieve", "rerank", "apply")
    vanilla = MethodConfig.from_dict(methods.method("vanilla_rag").variant())
    assert vanilla.roles_used() == ("leveler",)
    # the run may time and cache it (without the declaration it may not: below)
    m = MedR2(vanilla, cache=StageCache(tmp_path / "stages.sqlite"))
    with m.stage("toy_grader"):
        pass
    assert "toy_grader" in m.timings
    # the dry-run refuses an estimate that leaves out a declared stage that calls a model
    with pytest.raises(RuntimeError, match="does not count stage.*toy_grader"):
        uncounted(vanilla, [], demos=False)


def test_a_stage_that_runs_undeclared_is_an_error(tmp_path):
    from medr2_hooks.cache import StageCache
    from medr2_hooks.pipeline.medr2 import MedR2

    m = MedR2(MethodConfig(), cache=StageCache(tmp_path / "stages.sqlite"))
    with pytest.raises(RuntimeError, match="ran stage 'toy_grader', which it does not declare"):
        with m.stage("toy_grader"):
            pass
    vanilla = MedR2(MethodConfig.from_dict(methods.method("vanilla_rag").variant()),
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


def _specs(tmp_path, methods_: list[str]):
    """Each method's pre-pass spec on two MedQA-USMLE questions and one demonstration over the demo index."""
    from medr2_hooks.experiments.config import load_experiment
    from medr2_hooks.experiments.cost import target_name
    from medr2_hooks.experiments.cost_sizes import tokens_for
    from medr2_hooks.experiments.expand import expand
    from medr2_hooks.prepass.spec import prepass_spec
    from medr2_hooks.retrieve.build import ensure_index

    ensure_index("textbooks_demo")
    path = tmp_path / "methods.yaml"
    path.write_text("name: methods\nmodels: [{name: gemma-270m, model: 'embedded:gemma-270m'}]\n"
                    f"methods: [{', '.join(methods_)}]\nbenchmarks: [medqa_usmle]\nlimit: 2\n"
                    "method_override: {retrievers: [dense], retrieve_k: 4, coarse_k: 3, iterations: 2, max_demos: 1}\n")
    for run in expand(load_experiment(str(path))):
        spec = prepass_spec(run.benchmark, method=run.method, scoring=run.scoring, limit=run.limit,
                            target=tokens_for(target_name(run)).model, **run.metadata)
        yield run, spec


def test_the_dry_runs_model_counts_what_every_method_runs(tmp_path):
    """Issue 42.2: every retrieval method of the registry, its pipeline run against counting stand-ins
    (medr2_hooks/experiments/cost_run.py) on the questions the dry-run's model counts: the same requests per stage."""
    from medr2_hooks.experiments.cost import check_model

    retrieval = [n for n, m in methods.METHODS.items() if m.retrieval]
    for run, spec in _specs(tmp_path, retrieval):
        rows = check_model(spec.cfg, run.benchmark, [r.public() for r in spec.eval_records],
                           [d.demo() for d in spec.demos], run.scoring, methods.method(run.method).answer)
        assert all(m == r for m, r in rows.values()), (run.method, rows)
        if spec.cfg.rerank and spec.cfg.pipeline == "medr2":
            assert rows["evidence_level"][1] > 0, run.method


def test_a_stage_that_runs_and_that_the_estimate_does_not_count_fails_the_check(with_toy, tmp_path, monkeypatch):
    """A stage added to the code and its declaration (here: the leveler grading each ranked document once more) runs
    in the counted pipeline; the dry-run's model, not told, is refused by name."""
    from medr2_hooks.experiments.cost import check_model
    from medr2_hooks.llm.closed_set import label_distribution
    from medr2_hooks.pipeline.medr2 import MedR2

    def graded(m, questions, labels, refs, coarse):
        ranked = fine(m, questions, labels, refs, coarse)
        m.cached("toy_grader", [h["text"] for hits in ranked for h in hits], {"model": m.ids["leveler"]},
                 lambda texts: [float(p[0]) for p in label_distribution(
                     m.llm("leveler"), [f"{t}\nIs this sound evidence? Answer:" for t in texts], ["yes", "no"],
                     role="toy")])
        return ranked

    fine = MedR2.fine
    monkeypatch.setattr(MedR2, "fine", graded)
    monkeypatch.setitem(STAGE_SHAPES, "toy_grader", float)
    ((run, spec),) = _specs(tmp_path, ["medr2"])
    with pytest.raises(RuntimeError, match="toy_grader"):
        check_model(spec.cfg, run.benchmark, [r.public() for r in spec.eval_records], [d.demo() for d in spec.demos])


def test_a_stage_that_asks_otherwise_than_the_estimate_counts_fails_the_check(tmp_path, monkeypatch):
    """The conflict judge changed to judge each pair in both orders: the pipeline sends twice the requests the
    dry-run's model counts, and the check says so with both figures."""
    from medr2_hooks.experiments.cost import check_model
    from medr2_hooks.rerank import fine

    def both_orders(backend, document_sets, cfg):
        fine_conflicts(backend, [list(reversed(docs[: cfg.top])) for docs in document_sets], cfg)
        return fine_conflicts(backend, document_sets, cfg)

    fine_conflicts = fine.conflicts
    monkeypatch.setattr(fine, "conflicts", both_orders)
    ((run, spec),) = _specs(tmp_path, ["medr2"])
    # 2 questions + 1 demonstration, 2 iterations, 3 pairs among the 3 documents of S^c: 18 judgements, asked twice
    with pytest.raises(RuntimeError, match=r"conflict \(model 18, run 36\)"):
        check_model(spec.cfg, run.benchmark, [r.public() for r in spec.eval_records], [d.demo() for d in spec.demos])
