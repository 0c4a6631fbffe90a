"""RareArena graded as its authors grade (issue 30.2): the LLM judge's reference sets, its reply parsing, its place
in lm-eval's results beside the offline Orphanet lower bound, and a run judged by a served stand-in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medr2_hooks.config import ConfigError

FIXTURE = Path(__file__).parent / "fixtures" / "rarearena"


def test_reference_sets_are_rarearenas():
    from medr2_hooks.data import orphanet

    tree = orphanet.load()
    # score 2: the case's diagnosis and its Orphanet name; score 1: direct parents grouping <= 10 diseases
    assert tree.score_sets("Gaucher disease", "355", "Gaucher disease type 1") == (
        ["Gaucher disease type 1", "Gaucher disease"], [])  # Sphingolipidosis groups 17
    two, one = tree.score_sets("Glycogen storage disease due to acid maltase deficiency", "365")
    assert two == ["Glycogen storage disease due to acid maltase deficiency"]
    assert one == ["Lysosomal glycogen storage disease", "Glycogen storage disease with hypertrophic cardiomyopathy",
                   "Lysosomal disease with hypertrophic cardiomyopathy",
                   "Lysosomal disease with restrictive cardiomyopathy"]
    assert tree.score_sets("Marfan syndrome", "558", "marfan syndrome")[0] == ["marfan syndrome"]  # one wording


def test_offline_grade_is_a_lower_bound_with_synonyms_where_the_tree_has_them():
    from medr2_hooks.data.orphanet import Orphanet, load

    acid_maltase = ("Glycogen storage disease due to acid maltase deficiency", "365")
    assert load().grade("Pompe disease", *acid_maltase) == 0  # correct, but not an Orphanet name here
    assert load().grade("Lysosomal glycogen storage disease", *acid_maltase) == 1
    assert load().grade("Glycogen storage disease", *acid_maltase) == 0  # groups 24 diseases
    tree = Orphanet([{"Orphanetid": "365", "name": acid_maltase[0], "synonyms": ["Pompe disease", "GSD type II"],
                      "parents": [{"parent": "Lysosomal glycogen storage disease", "parent_disease_count": 2}]}])
    assert tree.grade("Pompe disease", *acid_maltase) == 2 and tree.grade("gsd type ii", *acid_maltase) == 2


@pytest.mark.parametrize("reply, grades, complete", [
    ("1. Gaucher disease: score 2;\n2. Fabry disease: score 0;\n3. Sphingolipidosis: score 1.", [2, 0, 1], True),
    ("**1. Gaucher disease**: Score: 2\n2) Fabry disease - score 0\n3. X: SCORE 1", [2, 0, 1], True),
    ("1. Gaucher disease: score 2;\n3. Sphingolipidosis: score 1.", [2, 0, 1], False),  # 2 not graded: 0, counted
    ("The first is right.\n1. Gaucher disease: score 2\n1. again: score 0\n2. a: score 0\n3. b: score 0\n4. c: score 2",
     [2, 0, 0], True),  # the first grade of a number counts; numbers past the list are ignored
    ("I cannot grade these.", [0, 0, 0], False),
])
def test_judge_replies_parse_strictly(reply, grades, complete):
    from medr2_hooks.lmeval.judge_client import parse_grades

    assert parse_grades(reply, 3) == (grades, complete)


def test_judged_metrics_follow_rarearenas_recall():
    from medr2_hooks.lmeval.diagnosis import judged_metrics

    got = judged_metrics({"items": ["a", "b", "c"], "grades": [1, 2, 0], "complete": True})
    assert got == {"top1": 0.0, "top5": 1.0, "top1_lenient": 1.0, "top5_lenient": 1.0, "judge_unparseable": 0.0}
    assert judged_metrics({"items": [], "grades": [], "complete": True})["top5"] == 0.0


def test_a_judge_that_cannot_mean_what_it_says_is_an_error():
    from medr2_hooks.lmeval import direct
    from medr2_hooks.lmeval.judge import check_judge

    assert check_judge("rarearena_rds", None) == ""
    with pytest.raises(ConfigError, match="free-text diagnosis"):
        check_judge("medqa_usmle", {"backend": "openai", "model": "gpt-4o"})
    with pytest.raises(ConfigError, match="secret"):
        check_judge("rarearena_rds", {"backend": "openai", "model": "gpt-4o", "api_key": "sk-x"})
    with pytest.raises(ConfigError, match="judge.backend"):
        check_judge("rarearena_rds", {"backend": "gpt", "model": "gpt-4o"})
    with pytest.raises(ConfigError, match="free-text diagnosis"):
        direct.load_dataset("medqa_usmle", judge={"backend": "openai", "model": "gpt-4o"})
    from medr2_hooks.experiments.config import Experiment, ModelSpec

    with pytest.raises(ValueError, match="none of this experiment's benchmarks"):
        Experiment("x", [ModelSpec("m")], ["direct"], ["medqa_usmle"], judge={"backend": "openai", "model": "gpt-4o"})


def test_report_headlines_the_judge_and_keeps_the_lower_bound():
    from medr2_hooks.experiments.report import primary_metric

    both = {"top5,judge": 0.6, "top5_lenient,judge": 0.7, "top5,orphanet": 0.2, "top5_lenient,orphanet": 0.3,
            "top1,judge": 0.4, "invalid,orphanet": 0.0}
    # RareArena publishes "total" recall (score 2 + score 1): the headline; score-2 recall goes beside it
    assert primary_metric(both) == ("top5_lenient,judge", 70.0)
    assert primary_metric({"top5,orphanet": 0.2, "top5_lenient,orphanet": 0.3}) == ("top5_lenient,orphanet", 30.0)


@pytest.mark.slow
def test_a_rarearena_run_judged_by_a_served_stand_in(tmp_path, monkeypatch):
    """lm-eval runs the task with a judge served by `medr2 serve` (SmolLM2-135M-Instruct, through chat
    completions as GPT-4o would be): both filters report, every case is asked once, each grade is the one its
    recorded reply gives, run.json names the judge; `medr2 judge` on the finished run re-grades from the cache and
    asks again only the cases whose reply could not be read (those were never cached)."""
    from medr2_hooks.lmeval.diagnosis import parse_list
    from medr2_hooks.cli.judge_cmd import judge_run
    from medr2_hooks.lmeval.judge import logged_grading
    from medr2_hooks.lmeval.judge_client import Judge, parse_grades
    from medr2_hooks.lmeval.runner import EvalConfig, run_eval
    from medr2_hooks.llm.hf import HFBackend
    from medr2_hooks.llm.serve import start_background

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    httpd, url = start_background(HFBackend("embedded:smollm2-135m-instruct", batch_size=4), "judge-stand-in")
    try:
        spec = {"backend": "openai", "api": "chat", "model": "judge-stand-in", "base_url": url}
        out = run_eval(EvalConfig(tasks=["rarearena_rds_direct"], model="embedded:smollm2-135m-instruct", limit=3,
                                  wandb=False, gen_kwargs="max_gen_toks=48",
                                  metadata={"cases_file": {"rarearena_rds": str(FIXTURE / "RDS.json")}, "judge": spec}))
        metrics = out["results"]["rarearena_rds_direct"]
        assert {"top1,judge", "top5,judge", "top5_lenient,judge", "judge_unparseable,judge", "top1,orphanet",
                "top5,orphanet", "invalid,orphanet", "short_list,orphanet"} <= set(metrics)
        assert out["n-samples"]["rarearena_rds_direct"]["effective"] == 3
        rows = out["samples"]["rarearena_rds_direct"]
        assert rows[0]["arguments"]["gen_args_0"]["arg_0"].endswith("Diagnoses:\n1.")
        offline = [r for r in rows if r["filter"] == "orphanet"]
        judged = [r for r in rows if r["filter"] == "judge"]
        assert len(offline) == len(judged) == 3
        for o, j in zip(sorted(offline, key=lambda r: r["doc_id"]), sorted(judged, key=lambda r: r["doc_id"])):
            graded = logged_grading(j)
            assert graded["items"] == parse_list(o["filtered_resps"][0]) and graded["judge"] == f"judge-stand-in@{url}"
            assert (graded["grades"], graded["complete"]) == (parse_grades(graded["reply"], len(graded["items"]))
                                                              if graded["items"] else ([], True))
        gradings = [logged_grading(r) for r in judged]
        asked = sum(bool(g["items"]) for g in gradings)
        run_dir = tmp_path / "runs" / out["run_record"]["name"]
        record = json.loads((run_dir / "run.json").read_text())
        assert record["judge"]["rarearena_rds_direct"] == {
            "model": f"judge-stand-in@{url}", "cases": 3,
            "unparseable": sum(not g["complete"] for g in gradings)}
        assert "api_key" not in json.dumps(record)

        judge = Judge.from_spec(spec)
        again = judge_run(run_dir, judge)
        # a graded reply comes from the stage cache; an empty or unparseable one was not cached and is asked again
        retried = sum(bool(g["items"]) and not g["complete"] for g in gradings)
        assert judge.backend.usage.prompts == retried
        assert again["tasks"]["rarearena_rds_direct"]["n"] == 3
        for key in ("top1", "top5", "judge_unparseable"):
            assert again["tasks"]["rarearena_rds_direct"][key] == pytest.approx(metrics[f"{key},judge"])
        assert asked >= 1  # greedy: the target (SmolLM2 too) writes a list for at least one case
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_paper_table8_is_judged_and_its_rehearsal_serves_a_stand_in_judge():
    from medr2_hooks.experiments.config import load_experiment
    from medr2_hooks.experiments.expand import expand
    from medr2_hooks.experiments.rehearse import SMOLLM, Plan, rehearsal, servers_needed

    exp = load_experiment("table8")
    assert exp.judge == {"backend": "openai", "api": "chat", "model": "gpt-4o", "base_url": "https://api.openai.com/v1"}
    runs = expand(exp)
    assert all(("judge" in r.metadata) == r.benchmark.startswith("rarearena") for r in runs)
    rehearsed = rehearsal(exp, Plan(benchmarks=("rarearena_rds",)))
    assert rehearsed.judge["model"] == SMOLLM and rehearsed.judge["api"] == "chat"
    assert SMOLLM in servers_needed(rehearsed) and rehearsed.rehearsal["judge"] == exp.judge
    assert rehearsal(exp, Plan(benchmarks=("medxpertqa",))).judge is None


def test_a_judge_that_cannot_answer_fails_before_the_run_generates():
    import socket

    from medr2_hooks.lmeval import direct
    from medr2_hooks.llm.openai_backend import EndpointError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    spec = {"backend": "openai", "api": "chat", "model": "gpt-4o", "base_url": f"http://127.0.0.1:{port}/v1"}
    with pytest.raises(EndpointError, match=f"127.0.0.1:{port}/v1/models"):
        direct.load_dataset("rarearena_rds", cases_file=str(FIXTURE / "RDS.json"), judge=spec)
