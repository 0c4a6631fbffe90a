"""Med-R² formulas with hand-computed values: Eq. 1–4, the query→genre mapping, conflict filtering,
Alg. 2 termination, window packing, iteration queries, strict label parsing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from medr2_hooks import loop
from medr2_hooks.apply.pack import pack
from medr2_hooks.classify import QUESTION_TYPES
from medr2_hooks.llm.closed_set import parse_label, softmax
from medr2_hooks.reformulate import echoes_prompt, iteration_query
from medr2_hooks.rerank import fine


def test_f_h_levels_and_guideline_level():
    assert fine.f_h(fine.EVIDENCE_LEVELS["meta-analysis"]) == 9
    assert fine.f_h(fine.EVIDENCE_LEVELS["randomized controlled trial"]) == 6
    assert fine.f_h(fine.EVIDENCE_LEVELS["expert opinion"]) == 1
    from medr2_hooks.corpus.document import GUIDELINE_LEVEL, Document

    assert fine.f_h(GUIDELINE_LEVEL) == 7
    doc = Document("g1", "Asthma", "Use inhaled corticosteroids.", "guideline", "en", evidence_level=8)
    assert doc.evidence_level == GUIDELINE_LEVEL  # fixed, whatever the source says
    with pytest.raises(ValueError):
        fine.f_h(0)


def test_every_question_type_maps_to_genres_and_process_is_included():
    assert set(fine.EXPECTED_DOC_TYPES) == set(QUESTION_TYPES)
    assert all(set(v) <= set(fine.DOC_TYPES) for v in fine.EXPECTED_DOC_TYPES.values())
    assert "process" in fine.EXPECTED_DOC_TYPES["procedural"]
    assert "definition" in fine.EXPECTED_DOC_TYPES["definition"]  # not "definitional": f_g would be 0
    assert fine.EXPECTED_DOC_TYPES["hypothetical"] == ("condition", "prediction", "cause-and-effect")


def test_f_g_sums_the_expected_genres():
    probs = {c: 0.0 for c in fine.DOC_TYPES} | {"process": 0.25, "instruction": 0.15, "definition": 0.4,
                                                "comparison": 0.2}
    assert fine.f_g(probs, "procedural") == pytest.approx(0.40)  # process + instruction
    assert fine.f_g(probs, "definition") == pytest.approx(0.40)  # definition
    assert fine.f_g(probs, "comparative") == pytest.approx(0.20)
    assert fine.f_g(probs, "hypothetical") == 0.0


def test_f_u_and_eq1():
    assert fine.f_u(2.5, 2.3) == pytest.approx(0.2)
    assert fine.f_u(2.0, 2.6) == 0.0  # a document that hurts gets no usefulness, never a negative one
    assert fine.fine_score(7.0, 0.5, 0.2) == pytest.approx(7 * 0.5 * 1.2)
    assert fine.fine_score(7.0, 0.5, 0.2, alpha=0.0) == pytest.approx(3.5)


def test_conflict_filter_drops_the_lower_level_side():
    levels = [4, 2, 6, 2]  # e: smaller is more credible
    coarse = [0.9, 0.8, 0.7, 0.6]
    assert fine.drop_conflicting(levels, coarse, [(0, 1, 0.9)]) == {0}
    assert fine.drop_conflicting(levels, coarse, [(0, 1, 0.9), (1, 2, 0.8)]) == {0, 2}
    assert fine.drop_conflicting(levels, coarse, [(1, 3, 0.7)]) == {3}  # same level: lower coarse score loses
    assert fine.drop_conflicting([3, 3], [0.5, 0.5], [(0, 1, 0.9)]) == {1}
    # a pair never loses both sides: one document of any set survives
    assert len(fine.drop_conflicting([1, 1, 1], [1, 1, 1], [(0, 1, .9), (0, 2, .9), (1, 2, .9)])) == 2


def test_softmax_gives_a_distribution_over_labels():
    p = softmax(np.array([[0.0, math.log(3.0)]]))
    assert p[0].tolist() == pytest.approx([0.25, 0.75])


def test_stability_is_the_centroid_shift():
    a = loop.centroid(np.array([[1.0, 0.0], [0.0, 1.0]]))
    b = loop.centroid(np.array([[1.0, 0.0], [1.0, 0.0]]))
    assert loop.stability(b, a) == pytest.approx(math.sqrt(0.5))
    assert loop.stability(a, None) is None  # t = 1: no previous set


@pytest.mark.parametrize("acc, mu, stop", [
    (1.0, 0.1, True),  # 10 > 6.85
    (1.0, 1 / 6.85, False),  # exactly δ is not above it
    (1.0, 0.2, False),  # 5
    (0.0, 0.01, False),
    (1.0, None, False),  # t = 1 never stops
    (1.0, 0.0, True),  # same set again: +inf
    (0.0, 0.0, False),  # 0/0 taken as 0
])
def test_alg2_termination(acc, mu, stop):
    assert loop.should_stop(acc, mu, delta=6.85) is stop


def test_cot_joins_the_query_from_iteration_2_unless_medr2_cot():
    assert iteration_query("Q?", "R", "C", t=1) == "Q?\nR"
    assert iteration_query("Q?", "R", "C", t=2) == "Q?\nR\nC"
    assert iteration_query("Q?", "R", "C", t=1, cot_in_first_query=True) == "Q?\nR\nC"
    assert iteration_query("Q?", None, None, t=1) == "Q?"
    assert iteration_query("Q?", "Q?", None, t=3) == "Q?"  # a reformulation equal to the question adds nothing


def test_packing_keeps_question_then_evidence_then_demos():
    p = pack(100, [300, 500, 200, 100], [400, 400, 400], window=1200, evidence_share=0.5, reserve=0)
    assert p.evidence == [0, 2, 3]  # 300 + 200 + 100 <= 600; the 500 one is skipped, not cut
    assert p.skipped_evidence == 1
    assert p.demos == [0]  # 100 + 600 + 400 = 1100; the next demo would overflow
    assert p.tokens == 1100


def test_question_longer_than_the_window_gets_nothing_and_is_flagged():
    p = pack(5000, [10], [10], window=4096)
    assert p.question_over_window and p.evidence == [] and p.demos == []


def test_generated_labels_are_parsed_strictly():
    labels = ["diagnosis", "therapy", "other"]
    assert parse_label("Therapy.", labels) == "therapy"
    assert parse_label("The category is diagnosis, not therapy", labels) == "diagnosis"
    assert parse_label("therapeutic", labels) is None
    assert parse_label("", labels) is None


def test_method_config_rejects_typos_and_unknown_roles():
    from medr2_hooks.config import ConfigError
    from medr2_hooks.pipeline.config import MethodConfig

    with pytest.raises(ConfigError, match="unknown key 'iteratons'"):
        MethodConfig.from_dict({"iteratons": 3})
    with pytest.raises(ConfigError, match="unknown role 'judge'"):
        MethodConfig.from_dict({"roles": {"judge": {"model": "x"}}})
    assert MethodConfig.from_dict({"conflict": {"top": 3}}).conflict.top == 3


def test_stage_cache_recomputes_corrupt_and_foreign_entries(tmp_path):
    from medr2_hooks.cache import StageCache

    cache = StageCache(tmp_path / "c.sqlite")
    calls = []

    def compute(xs):
        calls.append(list(xs))
        return [x * 2 for x in xs]

    assert cache.cached("double", [1, 2, 3], {"m": "a"}, compute) == [2, 4, 6]
    assert cache.cached("double", [1, 2, 3], {"m": "a"}, compute) == [2, 4, 6]
    assert calls == [[1, 2, 3]]  # the second run made no call
    key = cache.key(2, {"m": "a"})
    cache._db.execute("UPDATE stage SET value = '{not json' WHERE key = ?", [key])
    assert cache.cached("double", [1, 2, 3], {"m": "a"}, compute) == [2, 4, 6]
    assert calls[-1] == [2] and cache.stats["double:corrupt"] == 1
    cache._db.execute("UPDATE stage SET config = 'other' WHERE key = ?", [key])
    assert cache.cached("double", [2], {"m": "a"}, compute) == [4]
    assert calls[-1] == [2] and cache.stats["double:foreign"] == 1
    assert cache.cached("double", [1], {"m": "b"}, compute) == [2] and calls[-1] == [1]  # another config


def _task_method(task: str) -> dict:
    """The MethodConfig a task resolves to: its YAML names a registry method, whose settings go over the defaults."""
    from lm_eval.tasks._yaml_loader import load_yaml

    from medr2_hooks import methods
    from medr2_hooks.lmeval.registry import task_manager
    from medr2_hooks.pipeline.config import MethodConfig

    cfg = load_yaml(task_manager().task_index[task].yaml_path, resolve_func=False, recursive=False)
    return MethodConfig.from_dict(methods.method(cfg["dataset_kwargs"]["method"]).variant()).to_json()


def test_medr2_cot_tasks_differ_from_medr2_only_in_the_iteration_1_query():
    for bench in ("medqa_usmle", "medqa_mcmle", "medmcqa", "pubmedqa"):
        medr2, cot = _task_method(f"{bench}_medr2"), _task_method(f"{bench}_medr2_cot_gen")
        assert {k for k in medr2 if medr2[k] != cot[k]} == {"method", "cot_in_first_query"}
        assert cot["cot_in_first_query"] is True
    mmlu = _task_method("mmlu_med_medr2_anatomy")
    mmlu_cot = _task_method("mmlu_med_medr2_cot_anatomy")
    assert {k for k in mmlu if mmlu[k] != mmlu_cot[k]} == {"method", "cot_in_first_query"}


def test_llm_amt_and_vanilla_rag_tasks_select_their_stage_compositions():
    amt = _task_method("medqa_usmle_llm_amt")
    assert amt["pipeline"] == "llm_amt" and amt["method"] == "llm_amt"
    rag = _task_method("medqa_usmle_vanilla_rag_gen")
    assert (rag["retrievers"], rag["classify"], rag["reformulate"], rag["rerank"], rag["cot"]) == \
        (["dense"], False, False, False, False)
    qr = _task_method("nejmqa_ablation_qr")
    assert (qr["method"], qr["reformulate"], qr["rerank"], qr["cot"]) == ("ablation_qr", True, True, False)


def test_every_task_yaml_has_a_numeric_version():
    """lm-eval reports a task without ``metadata.version`` as version "Yaml", which breaks W&B result tables
    that mix it with numbered tasks."""
    import yaml

    from medr2_hooks import settings

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    for path in settings.tasks_dir().rglob("*.yaml"):
        task = yaml.load(path.read_text(), Loader=Loader)
        chain = [task]
        while "include" in chain[-1]:
            chain.append(yaml.load((path.parent / chain[-1]["include"]).read_text(), Loader=Loader))
        version = next((t["metadata"]["version"] for t in chain if "version" in (t.get("metadata") or {})), None)
        assert isinstance(version, (int, float)), f"{path.relative_to(settings.tasks_dir())}: no metadata.version"


def test_reformulations_that_repeat_their_prompt_are_detected():
    from medr2_hooks.reformulate import INSTRUCTIONS, TASK

    q = "A 21-year-old man has fever and knee pain. Which antibiotic blocks cell wall synthesis?"
    assert echoes_prompt(q, "therapy", f"{TASK} {INSTRUCTIONS['therapy']}")
    assert echoes_prompt(q, "therapy", "Question: A 21-year-old man has fever and  knee pain.")
    assert not echoes_prompt(q, "therapy", f"{TASK} {INSTRUCTIONS['diagnosis']}")  # not this question's prompt
    assert not echoes_prompt(q, "therapy", "ceftriaxone disseminated gonococcal infection septic arthritis treatment")
    assert not echoes_prompt(q, "therapy", "")


def test_delta_sensitivity_recomputes_where_recorded_loops_stop():
    """Issue 28: the stops under other δ from the recorded iterations (exact for smaller δ; larger δ marks loops
    that would have run past their record)."""
    from medr2_hooks import loop

    def it(t, acc, mu, docs=("d",)):
        return {"t": t, "acc": acc, "mu": mu, "doc_ids": list(docs)}

    states = [
        {"iterations": [it(1, 1.0, None), it(2, 1.0, 0.1)], "stopped_at": 2},  # ratio 10 > 6.85: stops at 2
        {"iterations": [it(1, 1.0, None), it(2, 1.0, 0.2), it(3, 0.0, 0.01)], "stopped_at": None},  # ratio 5, 0
        {"iterations": [it(1, 1.0, None), it(2, 1.0, 0.5, docs=())], "stopped_at": 2},  # nothing retrieved
    ]
    got = loop.delta_sensitivity(states, 6.85)
    assert got["1"] == {"delta": 6.85, "2": 2, "ran_all": 1}  # the recorded stops, reproduced
    assert got["0.5"] == {"delta": 3.425, "2": 3}  # ratio 5 > 3.4: the second loop would stop at 2 too
    assert got["2"] == {"delta": 13.7, "2": 1, "beyond_record": 1, "ran_all": 1}  # 10 < 13.7: would go on
    assert loop.stop_under(states[1]["iterations"], float("inf")) is None
