"""Med-R² around lm-eval's built-in multiple-choice tasks (``medr2 wrap``).

A wrap is two files the command writes under ``$MEDR2_CONFIG_DIR``:

- a benchmark declaration ``wrap_<task>`` (:mod:`medr2_hooks.data.declared`): the built-in's test split as the
  evaluated rows, its few-shot split as the demonstration rows, and a field mapping that reads question, options
  and answer from the built-in's documents (hub layout);
- a task ``wrap_<task>_<method>`` that includes the built-in task's YAML and ``tasks/templates/_wrap_yaml``.

:func:`load_dataset` returns the built-in's own rows, each test row with one more column, ``medr2_description``
(the built-in description, then the method's demonstrations and evidence), which lm-eval puts before the
built-in prompt. The pre-pass sees each question and its options (:meth:`Record.public`), never an answer.
The wrapped prompt is the built-in's, so the pre-pass chain of thought is not inserted into it (Med-R²'s own
``*_medr2`` tasks put it before ``Answer:``); evidence and demonstrations are.
"""

from __future__ import annotations

from .. import data, methods
from ..config import ConfigError
from ..data import declared

# field mappings of lm-eval built-ins whose hub rows we know; others need --fields
KNOWN = {
    "medqa_4options": {"fields": {"question": "sent1", "options": ["ending0", "ending1", "ending2", "ending3"],
                                  "answer": "label"}, "answer_format": "index0", "prompt": "medqa"},
    "medmcqa": {"fields": {"id": "id", "question": "question", "options": ["opa", "opb", "opc", "opd"],
                           "answer": "cop"}, "answer_format": "index0", "prompt": "medmcqa"},
    "mmlu_*": {"fields": {"question": "question", "options": "choices", "answer": "answer"},
               "answer_format": "index0", "prompt": "mmlu"},
}


def known_mapping(task: str, cfg: dict) -> dict | None:
    if task in KNOWN:
        return KNOWN[task]
    return KNOWN["mmlu_*"] if cfg.get("dataset_path") == "cais/mmlu" else None


def builtin_config(task: str) -> tuple[dict, str]:
    """The built-in task's merged YAML (functions unresolved) and its path."""
    from .compat import raw_task_yaml
    from .registry import task_manager

    manager = task_manager(include_defaults=True)
    if task not in manager.task_index:
        from ..errors import UnknownNameError

        raise UnknownNameError("lm-eval task", task, [t for t in manager.all_subtasks if t.startswith(task[:4])][:50])
    path = manager.task_index[task].yaml_path
    if path is None:
        raise ConfigError(f"{task} is not defined by a YAML file; it cannot be wrapped")
    cfg = raw_task_yaml(path)
    if cfg.get("output_type") != "multiple_choice":
        raise ConfigError(f"{task}: output_type {cfg.get('output_type')!r}; only multiple_choice tasks can be wrapped")
    return cfg, str(path)


def demo_split(cfg: dict) -> str | None:
    for key in ("fewshot_split", "training_split", "validation_split"):
        if cfg.get(key) and cfg[key] != cfg.get("test_split"):
            return cfg[key]
    return None


def splits(cfg: dict) -> list[str]:
    return sorted({cfg[k] for k in ("test_split", "fewshot_split", "training_split", "validation_split") if cfg.get(k)})


def load_dataset(benchmark: str, wrap_method: str, description: str = "", test_split: str = "test",
                 all_splits: list[str] | None = None, limit: int | None = None,
                 method_override: dict | None = None, **metadata):
    """``custom_dataset`` hook of a wrapped task: the built-in's rows, test rows with ``medr2_description``."""
    import datasets
    from lm_eval.utils import apply_template

    decl = data.benchmark(benchmark).declaration
    if decl is None or decl.wraps is None:
        raise ConfigError(f"{benchmark} is not a wrap; make one with `medr2 wrap <lm-eval task> --method ...`")
    if wrap_method not in methods.task_methods():
        raise ConfigError(f"wrap_method {wrap_method!r}; valid: {', '.join(methods.task_methods())}")
    test = [row for _, _, row in declared.rows(decl.source, decl.fields.columns(), decl.origin)]
    demos = [row for _, _, row in declared.rows(decl.demos, decl.fields.columns(), decl.origin)] if decl.demos else []
    if limit is not None:
        test = test[: int(limit)]
    if not methods.method(wrap_method).retrieval:
        prefixes = [""] * len(test)
    else:
        prefixes = _prefixes(benchmark, wrap_method, limit, method_override, len(test))
    rows = [{**row, "medr2_description": (apply_template(description, row) if description else "") + prefix}
            for row, prefix in zip(test, prefixes)]
    # every other split the built-in names holds the demonstration rows (none: an empty split), so lm-eval's
    # few-shot sampler finds the split it was configured with
    others = datasets.Dataset.from_list(demos or rows[:0])
    return datasets.DatasetDict({test_split: datasets.Dataset.from_list(rows),
                                 **{split: others for split in all_splits or [] if split != test_split}})


def _prefixes(benchmark: str, method: str, limit, override: dict | None, n: int) -> list[str]:
    from ..prepass.packs import packs_for
    from ..prepass.spec import prepass_spec

    spec = prepass_spec(benchmark, method=method, limit=limit, method_override=override or {})
    packs = packs_for(spec)
    if len(packs) != n:
        raise ConfigError(f"{benchmark}: {len(packs)} packs for {n} test rows (the declaration's rows changed?)")
    return [p["prefix"] for p in packs]
