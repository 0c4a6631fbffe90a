"""A retrieval task's pre-pass as an artifact: what determines it, where its record and packs live, and which
tasks have one.

:class:`PrepassSpec` holds everything that determines a task's pre-pass — benchmark, subject/split, the
resolved method config, the roles' model ids, the index's hashes and the items — and its :attr:`~PrepassSpec.key`
(a hash of that content) names two files:

    $MEDR2_RESULTS_DIR/prepass/<method>_<benchmark>[_<subject>]__<key>.json   the record (stages, calls, tokens)
    $MEDR2_CACHE_DIR/packs/<method>_<benchmark>[_<subject>]__<key>.json       the evidence packs (prompt prefixes)

so a run finds exactly the pre-pass of its own tasks, concurrent runs with other settings never share one, and
``medr2 prepare`` (its own process, before any target model loads) hands its packs to the lm-eval hook. Packs
live in the cache folder, which shards and nodes share.

Plain ``lm_eval --limit N`` never shows N to a dataset hook: ``medr2 prepare --limit N`` therefore also writes a
pointer for the task without a limit (``…__<key without items>.prepared.json``); the hook follows it when the
prepared items are the first N of the task's items, evaluates those N only, and says so in the log.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from .. import data, settings
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
    out = cfg.to_json()
    strip = lambda spec: {k: v for k, v in spec.items() if k not in TRANSPORT}  # noqa: E731
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

    @property
    def pointer_path(self) -> Path:
        """Where ``medr2 prepare --limit`` says which prefix of the task's items it prepared."""
        return settings.cache_dir() / "packs" / f"{self.name}__{stable_hash(self.identity(items=False))[:20]}.prepared.json"

    def shard(self, index: int, count: int) -> "PrepassSpec":
        """Items ``index, index + count, …`` of the evaluation items and of the demonstrations (deterministic)."""
        return PrepassSpec(self.benchmark, self.subject, self.split, self.source, self.cfg,
                           self.eval_records[index::count], self.demos[index::count], self.limited)


def prepass_spec(benchmark: str, method: dict | None = None, variant: dict | None = None, source: str = "local",
                 data_dir: str | None = None, subject: str | None = None, limit: int | None = None,
                 split: str | None = None, trained_items: list[str] | None = None,
                 cases_file: str | dict | None = None, **metadata) -> PrepassSpec:
    """The pre-pass of a task from the keyword arguments lm-eval gives its ``custom_dataset`` hook (task
    metadata merged with ``--metadata``, then ``dataset_kwargs``)."""
    # settings: the template's method, the task's variant (e.g. Med-R²-CoT), then the user's overrides
    merged = merge(merge(method or {}, variant or {}), metadata.pop("method_override", {}) or {})
    cfg = MethodConfig.from_dict(merged, f"{benchmark} method")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit < 0):
        raise ConfigError(f"{benchmark}: metadata limit must be a number >= 0, found {limit!r}")
    pools = data.pools(benchmark, source=source, data_dir=data_dir, cases_file=cases_file)
    eval_records = select(pools.eval, subject, split)
    refuse_trained(benchmark, eval_records, trained_items, limit)
    limited = bool(limit) and int(limit) < len(eval_records)
    if limit:
        eval_records = eval_records[: int(limit)]
    demos = pools.demos[: cfg.max_demos] if cfg.max_demos is not None else pools.demos
    return PrepassSpec(benchmark, subject, split, source, cfg, list(eval_records), list(demos), limited)


# -- packs: the artifact the hook reads ----------------------------------------------------------------------
def write_packs(spec: PrepassSpec, packs: list[dict]) -> tuple[Path, str]:
    """Write the packs artifact atomically; ``(path, sha256 of its bytes)``. With a limit, also the pointer
    that plain ``lm_eval --limit`` runs follow."""
    path = spec.packs_path
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"key": spec.key, "identity": spec.identity(), "packs": packs}, ensure_ascii=False,
                      sort_keys=True)
    atomic_write_text(path, text)
    if spec.limited:
        atomic_write_text(spec.pointer_path, json.dumps({"packs": path.name, "items": len(spec.eval_records)}))
    return path, hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_packs(path: Path, spec: PrepassSpec) -> list[dict] | None:
    """The packs of ``spec`` at ``path`` (None when absent or made for other content)."""
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:
        log.warning("prepared packs %s are damaged: ignored (the pre-pass runs again)", path)
        return None
    if stored.get("key") != spec.key or len(stored.get("packs", [])) != len(spec.eval_records):
        return None
    return stored["packs"]


def prepared_prefix(spec: PrepassSpec) -> PrepassSpec | None:
    """When the task's own items were not prepared but ``medr2 prepare --limit N`` prepared its first N items:
    the spec of those N (the hook then evaluates them only)."""
    try:
        pointer = json.loads(spec.pointer_path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    n = int(pointer.get("items", 0))
    if not 0 < n < len(spec.eval_records):
        return None
    prefix = PrepassSpec(spec.benchmark, spec.subject, spec.split, spec.source, spec.cfg, spec.eval_records[:n],
                         spec.demos, True)
    return prefix if prefix.packs_path.is_file() else None


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
