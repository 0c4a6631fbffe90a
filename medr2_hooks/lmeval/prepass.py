"""A retrieval task's pre-pass as an artifact: what determines it, where its record and packs live, and which
tasks have one.

:class:`PrepassSpec` holds everything that determines a task's pre-pass — benchmark, subject/split, the
resolved method config, the roles' model ids, the index's hashes and the items — and its :attr:`~PrepassSpec.key`
(a hash of that content) names two files:

    $MEDR2_RESULTS_DIR/prepass/<method>_<benchmark>[_<subject>]__<key>.json   the record (stages, calls, tokens)
    $MEDR2_CACHE_DIR/packs/<method>_<benchmark>[_<subject>]__<key>.json       the evidence packs (prompt prefixes)

so a run finds exactly the pre-pass of its own tasks, concurrent runs with other settings never share one, and
``medr2 prepare`` (its own process, before any target model loads) hands its packs to the lm-eval hook. Packs
live in the cache folder, which shards and nodes share. A packs file carries the sha256 of its packs: one whose
content no longer matches it (edited by hand, damaged) is refused with its name, never used.

A subset is evaluated only by a run that asks for it: ``--metadata '{"limit": N}'`` (``medr2 eval --limit N`` sets
it; plain ``lm_eval --limit N`` never shows N to a dataset hook) makes the pre-pass cover the first N items; a run
without it covers the whole benchmark, whatever a ``medr2 prepare --limit`` left in the cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from .. import data, methods, settings
from ..cache import stable_hash
from ..config import ConfigError
from ..data.record import Record
from ..fs import atomic_write_text, safe_component
from ..pipeline.config import ROLES, MethodConfig
from .direct import refuse_trained, select

log = logging.getLogger(__name__)
HOOK = "medr2_hooks.lmeval.medr2.load_dataset"
# how a role's requests travel, not what they compute: left out of the identity of a pre-pass
TRANSPORT = ("concurrency", "request_batch", "max_retries", "backoff", "timeout", "api_key", "api_key_env")


def _method_identity(cfg: MethodConfig) -> dict:
    """The resolved method config without how requests travel, and without credentials in endpoint URLs."""
    from ..redact import public_url

    out = cfg.to_json()
    strip = lambda spec: {k: public_url(v) if k == "base_url" and isinstance(v, str) else v  # noqa: E731
                          for k, v in spec.items() if k not in TRANSPORT}
    out["llm"] = strip(out["llm"])
    out["roles"] = {role: strip(spec) for role, spec in out["roles"].items()}
    return out


def merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for k, v in override.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@dataclass(frozen=True)
class PrepassSpec:
    benchmark: str
    subject: str | None
    split: str | None
    source: str
    cfg: MethodConfig
    eval_records: list[Record]
    demos: list[Record]
    limited: bool = False  # the items are the first ``limit`` of the task's items
    scoring: str = "letters"  # how the target answers: the demonstrations are rendered for it
    unprepared: tuple[Record, ...] = ()  # the task's items after the limit: rows lm-eval must not evaluate
    roles_check: dict | None = None  # which embedded parts run behind which target (not part of the identity)

    def identity(self, items: bool = True) -> dict:
        from ..pipeline.identity import backend_identity

        manifest = settings.cache_dir() / "indexes" / self.cfg.index / "manifest.json"
        index = {"name": self.cfg.index}
        if manifest.is_file():
            built = json.loads(manifest.read_text())
            index.update(recipe_hash=built["recipe_hash"], corpus_hash=built["corpus_hash"])
        out = {"benchmark": self.benchmark, "subject": self.subject, "split": self.split, "source": self.source,
               "method": _method_identity(self.cfg), "index": index,
               "models": {role: backend_identity(self.cfg.role(role)) for role in ROLES}}
        if self.scoring != "letters":  # letter-scored packs keep the identity they had before scorings existed
            out["scoring"] = self.scoring
        if items:
            out.update(eval_ids=[r.id for r in self.eval_records], demo_ids=[r.id for r in self.demos])
            if data.benchmark(self.benchmark).declaration is not None:
                # a user's file may change under the same ids: what the pre-pass reads is part of its identity
                out["content"] = stable_hash([[r.id, r.question, r.options] for r in self.eval_records] +
                                             [[r.id, r.question, r.options, r.answer] for r in self.demos])
        return out

    @property
    def key(self) -> str:
        return stable_hash(self.identity())[:20]

    @property
    def name(self) -> str:
        return safe_component("_".join(x for x in (self.cfg.method, self.benchmark, self.subject) if x),
                              "pre-pass name")

    @property
    def record_path(self) -> Path:
        return settings.results_dir() / "prepass" / f"{self.name}__{self.key}.json"

    @property
    def packs_path(self) -> Path:
        return settings.cache_dir() / "packs" / f"{self.name}__{self.key}.json"

    def shard(self, index: int, count: int) -> "PrepassSpec":
        """Items ``index, index + count, …`` of the evaluation items and of the demonstrations (deterministic)."""
        return dataclasses.replace(self, eval_records=self.eval_records[index::count], demos=self.demos[index::count])


def embedded_parts(cfg: MethodConfig) -> list[str]:
    """The parts of a method that run on an embedded (CPU-sized) model: the roles it uses, the packing tokenizer,
    and an index whose retrievers are embedded (the demo indexes)."""
    from ..corpus.recipe import find_recipe, load_recipe

    parts = [f"role {role} ({cfg.role(role)['model']})" for role in cfg.roles_used()
             if str(cfg.role(role)["model"]).startswith("embedded:")]
    if cfg.target_tokenizer.startswith("embedded:"):
        parts.append(f"the packing tokenizer ({cfg.target_tokenizer})")
    try:
        recipe = load_recipe(str(find_recipe(cfg.index)))
    except ConfigError:
        return parts  # an index built from a recipe outside the repository: not judged here
    if recipe.dense is not None and recipe.dense.encoder.startswith("embedded:"):
        parts.append(f"index {cfg.index} (dense {recipe.dense.encoder})")
    return parts


def target_from_argv(argv: list[str] | None = None) -> str | None:
    """The target a plain ``lm_eval --model M --model_args pretrained=P`` run evaluates (lm-eval never shows it to
    a dataset hook): ``P`` (or ``M``), or None when this process is not such a run."""
    import sys

    argv = sys.argv if argv is None else argv
    flags = {a.split("=", 1)[0]: (a.split("=", 1)[1] if "=" in a else argv[i + 1] if i + 1 < len(argv) else "")
             for i, a in enumerate(argv) if a.startswith("--model")}
    if "--model" not in flags:
        return None
    pretrained = [p.split("=", 1)[1] for p in flags.get("--model_args", "").split(",") if p.startswith("pretrained=")]
    return pretrained[0] if pretrained else flags["--model"]


def check_roles(cfg: MethodConfig, target: str | None, allow: bool, where: str) -> dict:
    """A non-embedded target with embedded roles, packing tokenizer or a demo index is an error naming each part,
    unless the run says ``allow_embedded_roles: true`` (recorded). ``target``: what the run evaluates (``medr2
    eval`` passes it; a plain lm_eval run's is read from its command line)."""
    from ..llm.embedded import is_embedded, is_embedded_path

    parts = embedded_parts(cfg)
    target = target or target_from_argv()
    out = {"target": target, "embedded_parts": parts, "allowed": bool(allow and parts)}
    if not parts or allow:
        return out
    if target is None:
        log.warning("%s: the target is unknown to this hook (pass --metadata '{\"target\": \"<model>\"}'); these "
                    "parts run on embedded models: %s", where, "; ".join(parts))
        return out
    if is_embedded(target) or is_embedded_path(target):
        return out
    raise ConfigError(f"{where}: the target {target} is not an embedded model, but {'; '.join(parts)} would run on "
                      "embedded models (a 270M judge behind a GPU target): give the roles served models "
                      "(method_override llm/roles, experiments/roles.yaml), a paper index and the target's "
                      "target_tokenizer, or set --metadata '{\"allow_embedded_roles\": true}' to run them anyway")


def prepass_spec(benchmark: str, method: str = "medr2", scoring: str = "letters", source: str = "local",
                 data_dir: str | None = None, subject: str | None = None, limit: int | None = None,
                 split: str | None = None, trained_items: list[str] | None = None,
                 cases_file: str | dict | None = None, target: str | None = None,
                 allow_embedded_roles: bool = False, **metadata) -> PrepassSpec:
    """The pre-pass of a task from the keyword arguments lm-eval gives its ``custom_dataset`` hook (task
    metadata merged with ``--metadata``, then ``dataset_kwargs``: benchmark, method name, scoring, subject)."""
    named = methods.method(method)
    if not named.retrieval:
        raise ConfigError(f"{benchmark}: method {method!r} has no pre-pass (retrieval methods: "
                          f"{', '.join(methods.retrieval_methods())})")
    if scoring not in methods.SCORINGS:
        raise ConfigError(f"{benchmark}: scoring {scoring!r}; valid: {', '.join(methods.SCORINGS)}")
    # settings: the method's registry entry over MethodConfig's defaults, then the user's overrides
    merged = merge(named.variant(), metadata.pop("method_override", {}) or {})
    cfg = MethodConfig.from_dict(merged, f"{benchmark} method")
    if not isinstance(allow_embedded_roles, bool):
        raise ConfigError(f"{benchmark}: metadata allow_embedded_roles must be true or false, found {allow_embedded_roles!r}")
    roles_check = check_roles(cfg, target, allow_embedded_roles, f"{benchmark} {method}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit < 0):
        raise ConfigError(f"{benchmark}: metadata limit must be a number >= 0, found {limit!r}")
    pools = data.pools(benchmark, source=source, data_dir=data_dir, cases_file=cases_file)
    eval_records = select(pools.eval, subject, split)
    refuse_trained(benchmark, eval_records, trained_items, limit)
    limited = bool(limit) and int(limit) < len(eval_records)
    rest = tuple(eval_records[int(limit):]) if limited else ()
    if limited:
        eval_records = eval_records[: int(limit)]
    demos = pools.demos[: cfg.max_demos] if cfg.max_demos is not None else pools.demos
    return PrepassSpec(benchmark, subject, split, source, cfg, list(eval_records), list(demos), limited, scoring, rest,
                       roles_check)


# -- packs: the artifact the hook reads ----------------------------------------------------------------------
def _digest(packs: list[dict]) -> str:
    return hashlib.sha256(json.dumps(packs, ensure_ascii=False, sort_keys=True).encode("utf-8")).hexdigest()


def write_packs(spec: PrepassSpec, packs: list[dict]) -> tuple[Path, str]:
    """Write the packs artifact atomically, with the sha256 of its packs; ``(path, sha256 of its bytes)``."""
    path = spec.packs_path
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"key": spec.key, "identity": spec.identity(), "packs": packs, "packs_sha256": _digest(packs)},
                      ensure_ascii=False, sort_keys=True)
    atomic_write_text(path, text)
    return path, hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_packs(path: Path, spec: PrepassSpec) -> list[dict] | None:
    """The packs of ``spec`` at ``path`` (None when absent, unreadable or made for other content). Packs whose
    content does not match the sha256 written with them, or whose file does not match the sha256 the pre-pass
    record of this results folder holds, are refused: a DataError naming the file."""
    from ..errors import DataError

    try:
        raw = path.read_bytes()
        stored = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        return None
    except (UnicodeDecodeError, json.JSONDecodeError):
        log.warning("prepared packs %s are damaged: ignored (the pre-pass runs again)", path)
        return None
    if not isinstance(stored, dict) or stored.get("key") != spec.key or \
            len(stored.get("packs") or []) != len(spec.eval_records):
        return None
    if stored.get("packs_sha256") != _digest(stored["packs"]):
        raise DataError(f"prepared packs {path} do not match the sha256 written with them (edited by hand or "
                        "damaged): delete the file and run `medr2 prepare` again")
    recorded = _recorded_sha256(spec, path)
    if recorded is not None and recorded != hashlib.sha256(raw).hexdigest():
        raise DataError(f"prepared packs {path} do not match the sha256 their pre-pass record {spec.record_path} "
                        "holds: delete the file and run `medr2 prepare` again")
    return stored["packs"]


def _recorded_sha256(spec: PrepassSpec, path: Path) -> str | None:
    try:
        packs = json.loads(spec.record_path.read_text(encoding="utf-8")).get("packs") or {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    return packs.get("sha256") if Path(packs.get("packs", "")) == path else None


def distributed_rank() -> tuple[int, int]:
    """``(rank, world size)`` under ``accelerate launch`` / ``torchrun`` (``(0, 1)`` otherwise)."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


# -- which tasks have a pre-pass ------------------------------------------------------------------------------
def task_hook_kwargs(names: list[str], metadata: dict | None = None) -> dict[str, dict]:
    """For every retrieval task among ``names`` (groups expanded): the keyword arguments lm-eval will give its
    dataset hook, built by lm-eval's own config loader (YAML includes, ``--metadata`` merged as lm-eval does)."""
    from .registry import check_tasks

    manager = check_tasks(names, metadata)
    out: dict[str, dict] = {}

    def visit(name: str) -> None:
        entry = manager.task_index[name]
        cfg = manager._factory._load_full_config(entry)  # lm-eval's merge of includes and runtime metadata
        members = cfg.get("task")
        if "group" in cfg and isinstance(members, list):
            for member in members:
                visit(member if isinstance(member, str) else member["task"])
            return
        hook = cfg.get("custom_dataset")
        if hook is not None and f"{getattr(hook, '__module__', '')}.{getattr(hook, '__name__', '')}" == HOOK:
            out[name] = {**(cfg.get("metadata") or {}), **(cfg.get("dataset_kwargs") or {})}

    for name in names:
        visit(name)
    return out
