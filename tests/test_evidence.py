"""Evidence you can score (issue 29): BioASQ-Y/N and the MIRAGE item sets, the gold-evidence collections, each
stage's documents scored against the gold (hand-computed values), MedRAG's strict JSON answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from medr2_hooks import data


def test_stage_scores_equal_hand_computed_values():
    from medr2_hooks.evidence.scores import paired, score, stage_scores

    qrels = {"q1": {"a": 1, "b": 1}, "q2": {"c": 1}, "q3": {"d": 1}}
    run = {"q1": ["x", "a", "a", "y", "b"], "q2": ["c"]}  # q3: nothing returned; "a" twice keeps rank 2
    got = score(run, qrels, ["q1", "q2", "q3"])
    assert got["R@1"] == {"q1": 0.0, "q2": 1.0, "q3": 0.0}
    assert got["R@10"] == {"q1": 1.0, "q2": 1.0, "q3": 0.0}
    assert got["RR@100"] == {"q1": 0.5, "q2": 1.0, "q3": 0.0}
    # q1: gold at ranks 2 and 4 (the duplicate removed): DCG = 1/log2(3) + 1/log2(5), ideal = 1 + 1/log2(3)
    ndcg_q1 = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert got["nDCG@10"]["q1"] == pytest.approx(ndcg_q1) and got["nDCG@10"]["q3"] == 0.0
    assert got["Success@1000"] == {"q1": 1.0, "q2": 1.0, "q3": 0.0}
    a = stage_scores("a", {"packed": run}, qrels, ["q1", "q2", "q3", "q4"])[0]  # q4: no judgements, not scored
    assert a.n == 3 and a.means["R@10"] == pytest.approx(2 / 3)
    b = stage_scores("b", {"packed": {"q1": ["b"], "q2": [], "q3": ["d"]}}, qrels, ["q1", "q2", "q3"])[0]
    diff = paired(a, b, "Success@1000")
    assert diff["diff"] == pytest.approx(0.0) and diff["n"] == 3  # (1, 1, 0) vs (1, 0, 1)


def test_bioasq_yn_is_mirages_618_yes_no_questions(data_root):
    from medr2_hooks.data import bioasq

    records = bioasq.load_yesno(data_root)
    assert len(records) == 618 and sum(r.answer == "yes" for r in records) == 395
    assert records[0].id == "6402c910201352f04a00000c"  # task 11, batch 1 first, as MIRAGE reads them
    assert all(r.meta["gold_pmids"] for r in records)
    assert all("gold_pmids" not in json.dumps(r.public().__dict__) for r in records[:5])  # stages never see them
    pools = data.pools("bioasq_yn")
    assert (len(pools.eval), len(pools.demos)) == (608, 10)


def test_the_mirage_item_sets(data_root):
    sizes = {"mirage_mmlu": 1089, "mirage_medqa": 1273, "mirage_medmcqa": 4183, "mirage_pubmedqa": 500,
             "mirage_bioasq": 618}
    for name, size in sizes.items():
        pools = data.pools(name)
        assert (len(pools.eval), len(pools.demos)) == (size, 0), name  # zero-shot: nothing taken out
    assert all(len(r.options) == 4 for r in data.pools("mirage_medqa").eval)


def test_the_bioasq_gold_collection(data_root):
    from medr2_hooks.data import bioasq
    from medr2_hooks.evidence.collections import collection, for_index

    col = collection("bioasq_gold")
    corpus = dict(bioasq.gold_documents(data_root))
    assert len(corpus) == 13449 and len(col.queries()) == 2310
    qrels = col.qrels()
    assert all(set(docs) <= set(corpus) for docs in qrels.values())
    first = bioasq.questions(data_root)[0]
    # relevant: the gold documents and the documents the gold snippets come from (issue 40.3)
    judged = set(first["gold"]) | {d for d, _ in first["snippets"]}
    assert set(qrels[first["id"]]) == judged & set(corpus) and set(col.qrels("all")[first["id"]]) == judged
    held = sum(len(d) for d in qrels.values())
    every = sum(len(col.qrels("all")[q]) for q in qrels)
    print(f"judged documents: {every}, of which the collection holds {held}")
    assert held <= every
    assert for_index("bioasq_gold") is col and for_index("bioasq_gold_bge") is col and for_index("textbooks") is None


def test_medrag_answers_are_read_strictly_from_json():
    from medr2_hooks.lmeval.generative import INVALID, extract_json_choice

    labels = ["A", "B", "C", "D"]
    good = 'Let me think. {"step_by_step_thinking": "cell wall...", "answer_choice": "D"}'
    assert extract_json_choice(good, labels) == "D"
    assert extract_json_choice('{"answer_choice": "(b)"}', labels) == "B"
    assert extract_json_choice('{"answer_choice": "A"} then {"answer_choice": "C"}', labels) == "C"
    for bad in ("The answer is D", '{"answer_choice": "A or B"}', '{"answer": "A"}', '{"answer_choice": "E"}', ""):
        assert extract_json_choice(bad, labels) == INVALID  # MIRAGE's scorer would answer "A" here
    assert extract_json_choice('{"answer_choice": "yes"}', ["yes", "no"]) == "yes"


def test_medrag_is_one_registry_entry_with_its_own_answer_format():
    from medr2_hooks import methods
    from medr2_hooks.lmeval.registry import task_manager
    from medr2_hooks.pipeline.config import MethodConfig

    cfg = MethodConfig.from_dict(methods.method("medrag").variant())
    assert (cfg.fusion, cfg.retrieve_k, cfg.retrievers, cfg.rerank, cfg.cot) == ("rrf", 32, None, False, False)
    tasks = set(task_manager().all_tasks)
    assert {"mirage_medrag", "mirage_medqa_medrag", "bioasq_yn_medrag", "medqa_usmle_medrag"} <= tasks
    assert "rarearena_rds_medrag" not in tasks and "mirage_medqa_medrag_gen" not in tasks


@pytest.mark.slow
def test_each_stage_of_a_run_over_the_gold_collection_is_scored(tmp_path, monkeypatch, capsys):
    """Vanilla RAG and Med-R² on 3 BioASQ-Y/N items over (a slice of) the gold-evidence collection: the run record
    holds every stage's scores, `medr2 evidence` prints them, and they equal the scores of the TREC files and the
    packs themselves."""
    import yaml

    from medr2_hooks import settings
    from medr2_hooks.cli.main import main
    from medr2_hooks.evidence.collections import collection
    from medr2_hooks.evidence.scores import score
    from medr2_hooks.lmeval.runner import EvalConfig, run_eval
    from medr2_hooks.evidence.stage_runs import read_run
    from medr2_hooks.retrieve.build import build
    from pipeline_helpers import TINY

    real = settings.cache_dir()
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(real / "models")
    monkeypatch.setenv("MEDR2_CACHE_DIR", str(cache))
    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path / "results"))
    recipe = yaml.safe_load((settings.REPO_ROOT / "index" / "bioasq_gold.yaml").read_text())
    recipe["sources"][0]["paths"] = "bioasq/Task11BGoldenEnriched/11B1_golden.json.gz"  # the first 3 questions' file
    path = tmp_path / "bioasq_gold.yaml"
    path.write_text(yaml.safe_dump(recipe))
    from medr2_hooks.corpus.recipe import load_recipe

    build(load_recipe(str(path)), cache / "indexes" / "bioasq_gold", log=lambda *_: None)
    metadata = {"method_override": {**TINY, "index": "bioasq_gold"}}
    out = run_eval(EvalConfig(tasks=["bioasq_yn_direct", "bioasq_yn_vanilla_rag", "bioasq_yn_medr2"], limit=3,
                              metadata=metadata, run_name="gold", wandb=False, prepare=False))
    assert all(0 <= out["results"][t]["acc,none"] <= 1 for t in ("bioasq_yn_direct", "bioasq_yn_medr2"))
    evidence = out["run_record"]["evidence"]
    assert set(evidence) == {"bioasq_yn_vanilla_rag", "bioasq_yn_medr2"}
    qrels = collection("bioasq_gold").qrels()
    for task, got in evidence.items():
        pre = out["run_record"]["prepass"][task]
        packs = json.loads(Path(pre["packs"]["packs"]).read_text())
        ids = packs["identity"]["eval_ids"]
        packed = {q: list(dict.fromkeys(e["doc_id"] for e in p["evidence"])) for q, p in zip(ids, packs["packs"])}
        assert read_run(Path(pre["stage_runs"]["folder"]) / "packed.trec") == {q: d for q, d in packed.items() if d}
        judged = [q for q in ids if qrels.get(q)]
        assert got["stages"]["packed"]["n"] == len(judged) == 3
        by_hand = score(packed, qrels, judged)
        for measure in ("R@10", "nDCG@10", "Success@1000"):
            assert got["stages"]["packed"][measure] == pytest.approx(sum(by_hand[measure].values()) / 3, abs=1e-4)
    assert "fine.final" in evidence["bioasq_yn_medr2"]["stages"]
    assert "fine.final" not in evidence["bioasq_yn_vanilla_rag"]["stages"]
    capsys.readouterr()  # the evaluation's own tables
    assert main(["evidence", str(tmp_path / "results" / "runs" / "gold"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["collection"] == "bioasq_gold" and {s["stage"]
                                                       for s in printed["scores"]} >= {"packed", "fused.final"}
    assert any(p["stage"] == "packed" and p["measure"] == "R@10" for p in printed["paired"])


@pytest.mark.slow
def test_mirages_medrag_group_runs(tmp_path):
    """`medr2 eval --tasks mirage_medrag --limit 2`: MIRAGE's five sets with MedRAG's JSON answers, each answer
    scored strictly and its invalid rate reported."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "MEDR2_RESULTS_DIR": str(tmp_path)}
    # a 1K window: MedRAG's snippets fill whatever window it is given (evidence_share 1), and 4K-token prompts on
    # two CPU cores cost ten minutes here without testing anything the 1K prompts do not
    done = subprocess.run([sys.executable, "-m", "medr2_hooks.cli.main", "eval", "--tasks", "mirage_medrag", "--limit",
                           "2", "--gen_kwargs", "max_gen_toks=32", "--no_wandb", "--run_name", "mirage",
                           "--metadata", '{"method_override": {"window": 1024}}'], env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "runs" / "mirage" / "run.json").read_text())
    for name in ("mirage_mmlu", "mirage_medqa", "mirage_medmcqa", "mirage_pubmedqa", "mirage_bioasq"):
        got = record["results"][f"{name}_medrag"]
        assert 0 <= got["acc,none"] <= 1 and 0 <= got["invalid,none"] <= 1
        assert record["n_samples"][f"{name}_medrag"]["effective"] == 2
    assert record["prepass"]["mirage_medqa_medrag"]["config"]["fusion"] == "rrf"
    assert record["prepass"]["mirage_medqa_medrag"]["config"]["window"] == 1024


def test_medrag_reads_its_32_fused_snippets_when_the_window_holds_them():
    """MedRAG's setting is RRF over the index's retrievers, 32 snippets: all 32 reach the prompt when they fit
    (found on review: the evidence was cut to the default coarse_k of 5)."""
    from medr2_hooks.pipeline.toolbox import StageToolbox
    from medr2_hooks.pipeline.medr2 import prepare
    from medr2_hooks.prepass.spec import build_spec

    spec = build_spec("mirage_medqa", method="medrag", scoring="generative", limit=1,
                      method_override={"window": 32768})
    packs, _ = prepare(StageToolbox(spec.cfg), "mirage_medqa", [r.public() for r in spec.eval_records], [],
                       "generative", answer="medrag")
    assert packs[0]["effective_k"] == len(packs[0]["evidence_texts"]) == 32


def test_answer_text_in_the_evidence_is_a_labelled_weak_signal():
    from medr2_hooks.evidence.scores import answer_in_evidence

    texts = {"q1": "Evidence:\n[1] Ceftriaxone inhibits cell wall synthesis.", "q2": "Evidence:\n[1] Aspirin.",
             "q3": ""}
    assert answer_in_evidence(texts, {"q1": "ceftriaxone", "q2": "Imatinib", "q3": "x"}) == \
        {"q1": 1.0, "q2": 0.0, "q3": 0.0}


def test_the_own_article_summary_reaches_the_evidence_record_and_the_report():
    from medr2_hooks.evidence.scores import summarize
    from medr2_hooks.experiments.expand import Run
    from medr2_hooks.experiments.report_sections import own_article_table
    from medr2_hooks.evidence.stage_runs import own_article_summary

    ranks = {"q1": {"dense": 1, "bm25": 3, "fused": 1}, "q2": {"dense": None, "bm25": 40, "fused": 77},
             "q3": {"dense": None, "bm25": None, "fused": None}}
    own = own_article_summary(ranks)
    assert own["by_retriever"] == {
        "bm25": {"at_1": 0, "within_10": 1, "within_100": 2, "median_rank": 21.5},
        "dense": {"at_1": 1, "within_10": 1, "within_100": 1, "median_rank": 1.0},
        "fused": {"at_1": 1, "within_10": 1, "within_100": 2, "median_rank": 39.0}}
    record = {"index": {"name": "textbooks_demo"}, "benchmark": "pubmedqa", "own_article": own}
    got = summarize({"pubmedqa_vanilla_rag": record})["pubmedqa_vanilla_rag"]
    assert got["own_article"]["n"] == 3 and "ranks" not in got["own_article"]  # per-question ranks stay in the record
    run = Run("e", "gemma-270m", "vanilla_rag", "pubmedqa", 4096, "pubmedqa_vanilla_rag", "hf", "", None)
    table = "".join(own_article_table([run], {run.name: {"evidence": got}}))
    assert "| gemma-270m | vanilla_rag | pubmedqa | 3 | fused | 1 | 1 | 2 (of 100) | 39 |" in table
    assert own_article_table([run], {run.name: {"evidence": {}}}) == []
