"""The lm-eval internals this package uses live behind medr2_hooks.lmeval.compat (issue 27.2): these tests call
each against the installed lm-eval, so a release that moves one fails here, by name, not inside a run."""

from __future__ import annotations

from medr2_hooks.lmeval import compat
from medr2_hooks.settings import REPO_ROOT


def test_full_task_config_merges_includes_and_run_metadata():
    from medr2_hooks.lmeval.registry import task_manager

    manager = task_manager(metadata={"limit": 2, "method_override": {"window": 2048}})
    cfg = compat.full_task_config(manager, "medqa_usmle_medr2")
    assert cfg["output_type"] == "multiple_choice"  # from the included template
    assert cfg["dataset_kwargs"] == {"benchmark": "medqa_usmle", "method": "medr2"}
    assert cfg["metadata"]["limit"] == 2 and cfg["metadata"]["method_override"] == {"window": 2048}


def test_raw_task_yaml_merges_includes_and_leaves_functions_as_text():
    cfg = compat.raw_task_yaml(REPO_ROOT / "tasks" / "medqa_usmle" / "medqa_usmle_medr2.yaml")
    assert cfg["task"] == "medqa_usmle_medr2" and cfg["output_type"] == "multiple_choice"
    # unresolved: text (lm-eval writes it as the including file's folder joined to the dotted name)
    assert isinstance(cfg["custom_dataset"],
                      str) and cfg["custom_dataset"].endswith("medr2_hooks.lmeval.retrieval.load_dataset")


def test_only_compat_touches_lm_evals_private_names():
    """Every other module uses lm-eval's public API (a private name is one that starts with an underscore)."""
    import re

    package = REPO_ROOT / "medr2_hooks"
    private = re.compile(r"lm_eval(\.\w+)*\._\w+|\b_factory\b|_load_full_config|_yaml_loader")
    offenders = [str(p.relative_to(package)) for p in package.rglob("*.py")
                 if p.name != "compat.py" and private.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_a_pre_pass_spec_is_built_once_per_process():
    from medr2_hooks.prepass.spec import build_spec, prepass_spec

    kwargs = {"benchmark": "medqa_usmle", "method": "vanilla_rag", "limit": 2}
    assert prepass_spec(**kwargs) is prepass_spec(**dict(reversed(kwargs.items())))
    assert prepass_spec(**kwargs) == build_spec(**kwargs) and prepass_spec(**{**kwargs, "limit": 3}).key != \
        prepass_spec(**kwargs).key
