"""Expand an experiment into runs, in the order that reuses the stage cache most.

Runs of one model are grouped; within a model, one benchmark's methods and windows follow each other with the
windows ascending, so every window after the first re-uses retrieval, reranking and CoT from the cache and
re-runs only packing and answering. Each run is one ``medr2 eval`` (one task) with a stable name.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import data, methods
from ..config import ConfigError, key_values, target_model
from ..errors import DataError
from ..lmeval.runner import CONTINUATION_MODEL
from .budget import candidates, size_candidates
from .config import LONG_WINDOW, Experiment, role_set

PAPER_CANDIDATE_RATIO = 3.0  # S^c tokens over the evidence budget that a paper config must reach


def experiment_tag(name: str) -> str:
    """The W&B tag of every run of an experiment (sweep, ``wandb agent`` and report runs alike; group: its name)."""
    return f"experiment:{name}"


@dataclass(frozen=True)
class Run:
    experiment: str
    model: str
    method: str
    benchmark: str
    window: int
    task: str
    lm_model: str
    model_args: str
    limit: int | None
    metadata: dict = field(default_factory=dict)
    resolved: dict = field(default_factory=dict)  # roles' models, evidence unit, coarse_k, window (retrieval runs)
    scoring: str = "letters"
    gen_kwargs: str | None = None
    apply_chat_template: bool = False

    @property
    def name(self) -> str:
        """Unique per cell: a generative run is its own cell (``__gen``), never a letter-scored run's results."""
        scoring = "" if self.scoring == "letters" else f"__{methods.SCORINGS[self.scoring].suffix.lstrip('_')}"
        return f"{self.experiment}__{self.model}__{self.method}__{self.benchmark}__w{self.window}{scoring}"

    @property
    def tags(self) -> list[str]:
        return [experiment_tag(self.experiment), f"model:{self.model}", f"method:{self.method}",
                f"benchmark:{self.benchmark}", f"window:{self.window}"]

    def to_json(self) -> dict:
        return {"name": self.name, **asdict(self)}


def expand(exp: Experiment) -> list[Run]:
    runs = []
    for spec in exp.models:
        for benchmark in exp.benchmarks:
            style = data.benchmark(benchmark).style
            for method in exp.methods:
                windows = [w for w in sorted(exp.windows) if spec.max_window is None or w <= spec.max_window]
                for window in windows if method != "finetune" else windows[:1]:
                    metadata = dict(exp.metadata)
                    if exp.judge is not None and style == "diagnosis":
                        metadata["judge"] = dict(exp.judge)
                    model_args, lm_model = spec.model_args, spec.model
                    resolved = {}
                    if method == "finetune":  # the same direct task, on the benchmark's checkpoint
                        resolved = finetune_checkpoint(exp, spec, benchmark)
                        model_args = ",".join(a for a in (f"pretrained={resolved['checkpoint']}",
                                                          _without_pretrained(model_args)) if a)
                        lm_model = CONTINUATION_MODEL if spec.model.startswith("embedded:") else spec.model
                    if methods.method(method).retrieval:
                        override = _retrieval_override(exp, spec, method, window)
                        metadata["method_override"] = override
                        if exp.allow_embedded_roles:
                            metadata["allow_embedded_roles"] = True
                        resolved = _resolved(exp, spec, method, override)
                    if window > LONG_WINDOW and spec.long_model_args:
                        model_args = ",".join(a for a in (model_args, spec.long_model_args) if a)
                    if not spec.model.startswith("embedded:"):  # every window's context, so 4K cells are one run
                        model_args = ",".join(a for a in (model_args, f"max_length={window}") if a)
                    generative = methods.suffix(style, exp.scoring) or style in methods.FREE_TEXT_STYLES
                    runs.append(Run(exp.name, spec.name, method, benchmark, window,
                                    methods.task_name(benchmark, method, exp.scoring, style), lm_model, model_args,
                                    exp.limit, metadata, resolved, exp.scoring,
                                    exp.gen_kwargs if generative else None,
                                    exp.apply_chat_template and spec.chat is not False))
    return _shared_cells(exp, runs)


def _shared_cells(exp: Experiment, runs: list[Run]) -> list[Run]:
    """``runs`` with the cells of ``exp.cells_from`` windows replaced by the other experiment's own runs (the same
    name, settings and results folder: evaluated once, read by both reports); a cell it lacks is an error."""
    if not exp.cells_from:
        return runs
    from .config import load_experiment

    out = list(runs)
    for other, windows in exp.cells_from.items():
        theirs = {(r.model, r.method, r.benchmark, r.window): r for r in expand(load_experiment(other))}
        for i, run in enumerate(out):
            if run.window in windows:
                twin = theirs.get((run.model, run.method, run.benchmark, run.window))
                if twin is None:
                    raise ConfigError(f"{exp.name}: cells_from {other}: {other} has no run for {run.model} "
                                      f"{run.method} {run.benchmark} at window {run.window}")
                out[i] = twin
    return out


def _retrieval_override(exp: Experiment, spec, method: str, window: int) -> dict:
    """A retrieval run's method settings: the experiment's (and its method's), the window packed (at most the
    model's cap), the target's tokenizer and role set, and S^c sized to ``candidate_ratio`` × the budget."""
    override = {**exp.method_override, **exp.method_overrides.get(method, {}),
                "window": min(window, spec.pack_window_cap or window)}
    if exp.collection and "index" not in override:  # the test collection's corpus (its CPU recipe)
        from ..evidence.collections import collection

        override["index"] = collection(exp.collection).indexes[0]
    if spec.tokenizer:
        override["target_tokenizer"] = spec.tokenizer
    if spec.roles or spec.role_set:
        roles = spec.roles or role_set(spec.role_set)  # inline: {"llm": spec} and/or {"roles": {role: spec}}
        unknown = sorted(set(roles) - {"llm", "roles"})
        if unknown:
            raise ConfigError(f"experiment {exp.name}: model {spec.name}: roles: unknown key {unknown[0]!r} (an "
                              "inline role set has llm: <spec> and/or roles: {<role>: <spec>})")
        llm = override.get("llm") or roles.get("llm")
        override = {**override, **({"llm": llm} if llm else {}),
                    "roles": {**(roles.get("roles") or {}), **override.get("roles", {})}}
    if exp.gen_kwargs and exp.scoring == "generative":  # the answer's room in the window, kept out of packing
        given = key_values(exp.gen_kwargs)
        if "max_gen_toks" in given:
            override["answer_tokens"] = int(given["max_gen_toks"])
    if exp.candidate_ratio:
        cfg = methods.resolve(method, override, f"{exp.name} {method}")
        k = max(cfg.coarse_k, size_candidates(cfg.index, cfg.unit, cfg.window, cfg.evidence_share,
                                              exp.candidate_ratio))
        override.update(coarse_k=k, retrieve_k=max(cfg.retrieve_k, k))
    return override


def _without_pretrained(model_args: str) -> str:
    return ",".join(a for a in model_args.split(",") if a and not a.startswith("pretrained="))


def pretrained_of(spec) -> str:
    """The hub id or folder a model spec loads (:func:`medr2_hooks.config.target_model` of its model and model_args)."""
    return target_model(spec.model, spec.model_args)


def finetune_checkpoint(exp: Experiment, spec, benchmark: str) -> dict:
    """The checkpoint a finetune cell evaluates and how it is made: the model's one ``finetuned`` folder, or
    ``<checkpoints>/<recipe>/final`` for the recipe the experiment maps the benchmark to, trained from the target."""
    from .. import settings

    from ..finetune.recipe import load_recipe, trained_format

    recipe = exp.finetune.get(benchmark)
    if recipe is None:
        folder = Path(spec.finetuned).expanduser()
        trained = trained_format(folder)
        if trained is None:
            return {"checkpoint": str(folder), "format": "checked when evaluated: the folder has no training manifest "
                                                         "yet and is no recipe's default output"}
        _check_trained_format(exp, spec, *trained)
        return {"checkpoint": str(folder)}
    named = load_recipe(recipe)
    _check_trained_format(exp, spec, named.answer_format, named.chat, f"recipe {recipe}")
    root = Path(os.path.expandvars(spec.checkpoints)).expanduser() if spec.checkpoints else \
        settings.cache_dir() / "finetune" / spec.name
    base = pretrained_of(spec)
    return {"checkpoint": str(root / recipe / "final"), "recipe": recipe, "base_model": base,
            "train": f"accelerate launch --config_file finetune/accelerate/multi_gpu_fsdp.yaml -m medr2_hooks.finetune "
                     f"{recipe} --model {base} --output_dir {root / recipe}"}


def _check_trained_format(exp: Experiment, spec, answer_format: str, chat: bool, what: str) -> None:
    """:func:`medr2_hooks.finetune.recipe.check_read_as` for this experiment's finetune cells of ``spec``."""
    from ..finetune.recipe import check_read_as

    check_read_as(answer_format, chat, exp.scoring == "generative", bool(exp.apply_chat_template
                  and spec.chat is not False), f"{exp.name} {spec.name}: {what}")


def _resolved(exp: Experiment, spec, method: str, override: dict) -> dict:
    """What a retrieval run will use; an embedded role behind a non-embedded target is an error unless the
    experiment says ``allow_embedded_roles: true`` (a GPU sweep must not silently judge with a 270M model)."""
    cfg = methods.resolve(method, override, f"{exp.name} {spec.name} {method} method_override")
    from ..llm.embedded import is_embedded
    from ..prepass.spec import check_roles

    roles = {role: cfg.role(role)["model"] for role in cfg.roles_used()}
    # the pre-pass's own rule (a GPU sweep must not silently judge with a 270M model), applied before launch
    check_roles(cfg, pretrained_of(spec), exp.allow_embedded_roles, f"experiment {exp.name}: {spec.name} {method}",
                "allow_embedded_roles: true in the experiment (or give the model a role_set of experiments/roles.yaml)")
    embedded_target = is_embedded(pretrained_of(spec))
    out = {"stages": list(methods.method(method).stages()), "roles": roles, "unit": cfg.unit,
           "coarse_k": cfg.coarse_k, "window": cfg.window, "retrievers": cfg.retrievers,
           "label_scoring": cfg.label_scoring, "index": cfg.index, "query": cfg.query,
           "cot_max_new_tokens": cfg.cot_max_new_tokens}
    try:
        out["candidates"] = candidates(cfg.index, cfg.unit, cfg.coarse_k, cfg.window, cfg.evidence_share)
    except (ConfigError, DataError) as exc:  # an index not yet built: the plan stands, its size is unknown
        out["candidates"] = {"unknown": str(exc)}
    # a paper experiment on GPU targets (not a CPU twin, not a rehearsal) must give the fine reranker a choice
    needed = exp.candidate_ratio or (PAPER_CANDIDATE_RATIO if exp.paper_table and not embedded_target
                                     and not exp.rehearsal else None)
    ratio = out["candidates"].get("ratio")
    if needed and (ratio is None or ratio < needed):
        held = f"{out['candidates']['tokens']} tokens, {ratio}x the {out['candidates']['budget']}-token" if ratio \
            else f"an unknown number of tokens ({out['candidates']['unknown']}) against the"
        raise ConfigError(f"experiment {exp.name}: {spec.name} {method} window {cfg.window}: S^c ({cfg.coarse_k} "
                          f"{cfg.unit}s) holds {held} evidence budget; a paper config needs {needed}x so that the fine "
                          "reranker has something to choose (use `setting: paper`, which sizes it per window)")
    return out
