"""One place per idea: the method registry generates the task YAMLs, and everything that names a method reads it."""

from __future__ import annotations

import re
from types import MappingProxyType

import pytest

from medr2_hooks import methods, settings
from medr2_hooks.lmeval import taskgen


def test_committed_task_files_are_the_generated_ones():
    """`make tasks` writes tasks/ from the registries; a hand edit, or a registry change without regenerating,
    is a difference listed here."""
    assert taskgen.differences(settings.tasks_dir()) == []


def test_a_new_method_is_one_registry_entry(monkeypatch, tmp_path):
    """Adding a method: its tasks for every benchmark and scoring, MMLU subjects and the suite groups follow."""
    from medr2_hooks import data

    extra = methods.Method("medr2_t3", "Med-R² (3 iterations)", MappingProxyType({"iterations": 3}), "test")
    monkeypatch.setitem(methods.METHODS, "medr2_t3", extra)
    files = taskgen.shipped_files()
    tasks = {cfg.get("group") or cfg["task"] for cfg in files.values()}
    for bench in data.BENCHMARKS.values():
        for scoring in methods.scorings_for(bench.style, "medr2_t3"):
            assert methods.task_name(bench.name, "medr2_t3", scoring, bench.style) in tasks
    assert {"mmlu_med_medr2_t3_gen_anatomy", "medr2_qa_medr2_t3_gen", "medr2_clinical_medr2_t3"} <= tasks
    assert files["medqa_usmle/medqa_usmle_medr2_t3_gen.yaml"]["dataset_kwargs"] == {
        "benchmark": "medqa_usmle", "method": "medr2_t3", "scoring": "generative"}
    assert taskgen.write(tmp_path) == len(files) and taskgen.differences(tmp_path) == []
    monkeypatch.delitem(methods.METHODS, "medr2_t3")
    assert taskgen.write(tmp_path) == len(files) - len([f for f in files if "medr2_t3" in f])
    assert not list(tmp_path.rglob("*medr2_t3*"))  # files the registry no longer makes are removed


def test_every_task_of_a_benchmark_and_scoring_exists():
    from medr2_hooks import data
    from medr2_hooks.lmeval.registry import task_manager

    known = set(task_manager().all_tasks)
    for bench in data.BENCHMARKS.values():
        for name in methods.task_methods():
            for scoring in methods.scorings_for(bench.style, name):
                assert methods.task_name(bench.name, name, scoring, bench.style) in known
    assert "rarearena_rds_medr2_gen" not in known  # free text: one scoring, under the plain name
    assert methods.task_name("rarearena_rds", "medr2", "generative", "diagnosis") == "rarearena_rds_medr2"


def test_method_settings_live_in_one_place():
    """δ, the ablation switches and the baselines' settings are written once: in MethodConfig's defaults and the
    registry, not in task YAMLs, experiment code or the CLI."""
    root = settings.REPO_ROOT
    places = [p for p in [*root.joinpath("medr2_hooks").rglob("*.py"), *root.joinpath("tasks").rglob("*yaml")]
              if "6.85" in p.read_text(encoding="utf-8")]
    assert [p.relative_to(root).as_posix() for p in places] == ["medr2_hooks/pipeline/config.py"]
    for path in root.joinpath("medr2_hooks").rglob("*.py"):
        if path.name != "methods.py":
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"cot_in_first_query[\"']?\s*:\s*True", text), path
            assert not re.search(r"\"retrievers\":\s*\[\"dense\"\]", text), path


def test_methods_name_their_stages():
    assert methods.method("vanilla_rag").stages() == ("retrieve", "apply")
    assert methods.method("ablation_c").stages() == ("retrieve", "cot", "loop", "apply")
    assert methods.method("medr2").stages() == ("classify", "reformulate", "retrieve", "rerank", "cot", "loop", "apply")
    assert methods.method("direct").stages() == () and not methods.method("finetune").has_tasks
    with pytest.raises(Exception, match="unknown method 'medr3'"):
        methods.method("medr3")
