"""Experiment configs (``experiments/*.yaml``): models × methods × benchmarks × windows, validated on load.

An unknown method, benchmark or window is an error before any run starts, listing the valid values.
Methods are the registry's (:mod:`medr2_hooks.methods`): ``direct``, ``vanilla_rag``, ``llm_amt``, ``medr2``,
``medr2_cot``, ``finetune`` (the ``*_direct`` task on a model's fine-tuned checkpoint) and the Table 10 ablations
``ablation_<q|r|c combination>`` (q = query reformulator, r = evidence reranker, c = CoT generator;
``ablation_qrc`` is Med-R² itself). ``scoring`` picks the tasks' scoring (:data:`medr2_hooks.methods.SCORINGS`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .. import data, methods, settings
from ..config import ConfigError, from_dict, in_range, load_yaml, merge
from ..fs import read_json, safe_component

WINDOWS = (4096, 8192, 16384, 32768, 65536, 131072)
LONG_WINDOW = 32768  # Qwen2.5's native context: YaRN only beyond it, so 4K-32K cells match the plain model


@dataclass(frozen=True)
class ModelSpec:
    name: str  # short name used in run names and tables
    model: str = "hf"  # lm-eval model type or an embedded: name
    model_args: str = ""
    tokenizer: str | None = None  # the target tokenizer for window packing (default: the pretrained path)
    finetuned: str | None = None  # one checkpoint folder for every benchmark's finetune cell (the CPU twin)
    checkpoints: str | None = None  # folder of this target's per-recipe checkpoints (default: cache/finetune/<name>)
    max_window: int | None = None  # the longest window the model takes (Qwen beyond 32K: YaRN in model_args)
    role_set: str | None = None  # the roles' models for this target (experiments/roles.yaml)
    long_model_args: str = ""  # added to model_args above LONG_WINDOW only (Qwen2.5: YaRN rope scaling)
    roles: dict | None = None  # inline {"llm": spec, "roles": {role: spec}} instead of a role_set (the rehearsal's)
    pack_window_cap: int | None = None  # pack at most this many tokens whatever the window (a stand-in's context)
    # a chat (instruction-tuned) model: the experiment's chat template applies to it; false: a base model, sent the
    # plain prompt (its generative cue names the answer format); None: as the experiment says (apply_chat_template)
    chat: bool | None = None


@dataclass(frozen=True)
class Experiment:
    name: str
    models: list[ModelSpec]
    methods: list[str]
    benchmarks: list[str]
    windows: list[int] = field(default_factory=lambda: [4096])
    setting: str | None = None  # a shared setting of experiments/settings.yaml (its fields under this file's)
    scoring: str = "letters"  # letters | generative (free-text benchmarks are always generative)
    gen_kwargs: str | None = None  # lm-eval --gen_kwargs for generative tasks (the twins cap max_gen_toks)
    apply_chat_template: bool = False  # lm-eval's --apply_chat_template for the target (chat models)
    # S^c holds at least this many times the evidence budget in every retrieval run: coarse_k (and retrieve_k)
    # are sized per window from the index's unit size (experiments/budget.py); None: the settings' k as given
    candidate_ratio: float | None = None
    limit: int | None = None  # a fixed slice per benchmark (embedded twins)
    method_override: dict = field(default_factory=dict)  # MethodConfig settings for every retrieval run
    method_overrides: dict[str, dict] = field(default_factory=dict)  # per method, applied after method_override
    metadata: dict = field(default_factory=dict)  # other task metadata (cases_file, split, ...)
    description: str = ""
    paper_table: str | None = None  # the paper's table printed beside ours ("2", "8", "9", "10")
    anchors: str | None = None  # published numbers printed beside ours: experiments/<anchors>_numbers.csv (mirage)
    # a test collection with relevance judgements (medr2_hooks.evidence): retrieval runs search its index and the
    # report scores every stage's evidence against its qrels; accuracies are gold-corpus upper bounds
    collection: str | None = None
    # A non-embedded target whose roles resolve to an embedded model is an error at expansion unless this is set.
    allow_embedded_roles: bool = False
    # The finetune method's checkpoint per benchmark, as a recipe in finetune/recipes/ trained once per target:
    # within-dataset (the benchmark's own training split) or cross-dataset (another's, e.g. MedMCQA -> PubMedQA).
    finetune: dict[str, str] = field(default_factory=dict)
    # RareArena's LLM judge (a backend spec; RareArena's authors used GPT-4o through chat completions): its top-1/top-5
    # are the headline of the RareArena cells, the offline Orphanet match stays beside them as the lower bound
    judge: dict | None = None
    # Set by `medr2 sweep --rehearse`: the paper experiment rehearsed and what stands in for each model and role.
    rehearsal: dict = field(default_factory=dict)
    # Measured tokens per second per role (cot, target, cross_encoder, ...) or model, TOTAL or "PREFILL:DECODE":
    # `medr2 sweep --dry-run` turns the cost estimate into GPU-hours (experiments/cost.py)
    throughput: dict = field(default_factory=dict)
    # cells that are another experiment's runs, by window: {table2: [4096]} makes Table 9's 4K cells Table 2's runs
    # (the same run names and settings, evaluated once, read by both reports)
    cells_from: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self):
        safe_component(self.name, "experiment name")
        for model in self.models:
            safe_component(model.name, "model name")
        for kind, values, valid in (("method", self.methods, list(methods.METHODS)),
                                    ("benchmark", self.benchmarks, data.names()), ("window", self.windows, WINDOWS),
                                    ("scoring", [self.scoring], list(methods.SCORINGS))):
            bad = [v for v in values if v not in valid]
            if bad:
                raise ValueError(f"unknown {kind} {bad[0]!r}; valid {kind}s: {', '.join(map(str, valid))}")
        if not self.models:
            raise ValueError("an experiment needs at least one model")
        from ..lmeval.runner import SERVED_MODELS

        for model in self.models:
            if model.model in SERVED_MODELS and ("finetune" in self.methods or model.long_model_args):
                raise ValueError(f"model {model.name} is a served target ({model.model}): its server fixes the weights "
                                 "and context (vllm serve flags), so it has no finetune cells or long_model_args; "
                                 "serve the checkpoint or the long-context model as its own target")
        in_range(self, "limit", 1)
        in_range(self, "candidate_ratio", 1)
        anchors = settings.REPO_ROOT / "experiments" / f"{self.anchors}_numbers.csv"
        if self.anchors is not None and not anchors.is_file():
            raise ValueError(f"anchors {self.anchors!r}: no experiments/{self.anchors}_numbers.csv")
        if self.collection is not None:
            from ..evidence.collections import collection

            collection(self.collection)
        bad = sorted(set(self.method_overrides) - set(self.methods))
        if bad:
            raise ValueError(f"method_overrides names {bad[0]!r}, which is not among this experiment's methods")
        for other, windows in self.cells_from.items():
            safe_component(other, "cells_from experiment")
            bad = [w for w in windows if w not in self.windows]
            if other == self.name or bad:
                raise ValueError(f"cells_from {other}: windows {bad or windows} are not this experiment's other "
                                 "windows" if bad else "cells_from names the experiment itself")
        self._check_finetune()
        self._check_judge()
        from .throughput import parse_throughputs

        parse_throughputs(self.throughput)

    def _check_judge(self) -> None:
        if self.judge is None:
            return
        from ..lmeval.judge import check_judge

        graded = [b for b in self.benchmarks if data.benchmark(b).style == "diagnosis"]
        if not graded:
            raise ValueError("judge: none of this experiment's benchmarks is graded by a judge (RareArena's free-text "
                             "diagnoses)")
        check_judge(graded[0], self.judge)

    def _check_finetune(self) -> None:
        """Every finetune cell has a checkpoint: the model's single ``finetuned`` folder or the recipe that the
        ``finetune`` map names for its benchmark, a recipe that evaluates that benchmark."""
        from ..finetune.recipe import load_recipe

        if self.finetune and "finetune" not in self.methods:
            raise ValueError("finetune maps benchmarks to recipes but 'finetune' is not among the methods")
        for benchmark, recipe_name in self.finetune.items():
            if benchmark not in self.benchmarks:
                raise ValueError(f"finetune names benchmark {benchmark!r}, which is not among this experiment's")
            recipe = load_recipe(recipe_name)
            if benchmark not in {s.benchmark for s in recipe.evaluate}:
                raise ValueError(f"finetune: recipe {recipe_name} does not list {benchmark} under evaluate, so "
                                 "nothing keeps its training items out of that benchmark's scored items")
        if "finetune" in self.methods:
            for model in self.models:
                missing = [b for b in self.benchmarks if b not in self.finetune and not model.finetuned]
                if missing:
                    raise ValueError(f"model {model.name} has no checkpoint for the finetune cells of "
                                     f"{', '.join(missing)}: give it `finetuned:` or map them in `finetune:`")

    def to_json(self) -> dict:
        return asdict(self)


ROLE_SETS = settings.REPO_ROOT / "experiments" / "roles.yaml"


def role_set(name: str) -> dict:
    """``{"llm": spec, "roles": {role: spec}}`` of a role set declared in ``experiments/roles.yaml``."""
    sets = load_yaml(ROLE_SETS).get("role_sets") or {}
    if name not in sets:
        raise ConfigError(f"{ROLE_SETS}: no role set {name!r}; declared: {', '.join(sorted(sets))}")
    return {"llm": dict(sets[name]["llm"]), "roles": {k: dict(v) for k, v in (sets[name].get("roles") or {}).items()}}


MODELS = settings.REPO_ROOT / "experiments" / "models.yaml"


def _model_entry(entry, where: str):
    """A model of an experiment: a name declared in ``experiments/models.yaml``, ``{use: <name>, ...}`` (that
    model with fields changed) or a full mapping."""
    if not isinstance(entry, (str, dict)) or (isinstance(entry, dict) and "use" not in entry):
        return entry
    name = entry if isinstance(entry, str) else entry["use"]
    declared = load_yaml(MODELS).get("models") or {}
    if name not in declared:
        raise ConfigError(f"{where}: model {name!r} is not declared in {MODELS}; declared: {', '.join(declared)}")
    changes = {} if isinstance(entry, str) else {k: v for k, v in entry.items() if k != "use"}
    return {"name": name, **declared[name], **changes}


SETTINGS = settings.REPO_ROOT / "experiments" / "settings.yaml"
SETTING_KEYS = ("method_override", "scoring", "apply_chat_template", "gen_kwargs", "candidate_ratio")


def named_setting(name: str, where: str) -> dict:
    """A shared setting of experiments/settings.yaml, its keys checked."""
    declared = load_yaml(SETTINGS).get("settings") or {}
    if name not in declared:
        raise ConfigError(f"{where}: setting {name!r} is not in {SETTINGS}; declared: {', '.join(declared)}")
    base = dict(declared[name])
    bad = sorted(set(base) - set(SETTING_KEYS))
    if bad:
        raise ConfigError(f"{SETTINGS}: setting {name}: unknown key {bad[0]!r}; valid keys: {', '.join(SETTING_KEYS)}")
    return base


def with_setting(raw: dict, where: str) -> dict:
    """An experiment's fields over its named shared setting (method_override merged key by key)."""
    name = raw.get("setting")
    if name is None:
        return raw
    base = named_setting(name, where)
    out = {**base, **raw}
    out["method_override"] = merge(base.get("method_override") or {}, raw.get("method_override") or {})
    return out


def setting_metadata(name: str, metadata: dict) -> dict:
    """``--setting NAME`` of ``medr2 eval`` and ``medr2 prepare``: the setting's method_override under the run's own
    ``--metadata`` (merged key by key). A setting that also fixes the scoring, the chat template, gen_kwargs or
    per-window candidate sizing needs an experiment config (``medr2 sweep``), which applies them; here it is an
    error rather than half of it applied."""
    base = named_setting(name, "--setting")
    rest = sorted(set(base) - {"method_override"})
    if rest:
        raise ConfigError(f"--setting {name}: the setting also sets {', '.join(rest)}, which one eval's --metadata "
                          "cannot carry: name it in an experiment config (setting: " + name + ") and run medr2 sweep")
    return merge({"method_override": base.get("method_override") or {}}, metadata)


def load_experiment(name_or_path: str) -> Experiment:
    from pathlib import Path

    path = Path(name_or_path)
    if not path.is_file():
        path = settings.REPO_ROOT / "experiments" / f"{name_or_path}.yaml"
    recorded = settings.results_dir() / name_or_path / "experiment.json"
    if not path.is_file() and "/" not in name_or_path and recorded.is_file():  # a rehearsal, as its sweep recorded it

        return from_dict(Experiment, read_json(recorded), str(recorded))
    if not path.is_file():
        known = sorted(p.stem for p in (settings.REPO_ROOT / "experiments").glob("*.yaml"))
        raise ConfigError(f"no experiment {name_or_path!r}: give a YAML path or one of: {', '.join(known)}")
    raw = with_setting(load_yaml(path), str(path))
    if isinstance(raw.get("models"), list):
        raw["models"] = [_model_entry(m, str(path)) for m in raw["models"]]
    return from_dict(Experiment, raw, str(path))
