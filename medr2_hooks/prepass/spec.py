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
import json
import logging
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .. import data, methods, settings
from ..cache import stable_hash
from ..config import ConfigError, target_model
from ..data.record import Record
from ..fs import read_json, safe_component
from ..pipeline.config import MethodConfig
from ..data.select import refuse_trained, select

log = logging.getLogger(__name__)
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
    # CPU threads of the float kernels (torch, FAISS), set in every process that runs this pre-pass (the driver, each
    # shard, each Ray worker): a float reduction split over another number of threads can differ in its last bits,
    # and shards must compute what the unsharded run computes. Recorded, not part of the identity (GPU kernels
    # ignore it; a cache made at another count holds the same values up to float rounding).
    threads: int = 1

    def identity(self, items: bool = True) -> dict:
        from ..pipeline.identity import backend_identity

        manifest = settings.cache_dir() / "indexes" / self.cfg.index / "manifest.json"
        index = {"name": self.cfg.index}
        if manifest.is_file():
            built = read_json(manifest)
            index.update(recipe_hash=built["recipe_hash"], corpus_hash=built["corpus_hash"])
        out = {"benchmark": self.benchmark, "subject": self.subject, "split": self.split, "source": self.source,
               "method": _method_identity(self.cfg), "index": index,
               "models": {role: backend_identity(self.cfg.role(role)) for role in self.cfg.roles_used()}}
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
    return target_model(flags["--model"], flags.get("--model_args"))


def check_roles(cfg: MethodConfig, target: str | None, allow: bool, where: str,
                allow_hint: str = "--metadata '{\"allow_embedded_roles\": true}'") -> dict:
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
                      f"target_tokenizer, or set {allow_hint} to run them anyway")


def prepass_spec(benchmark: str, **kwargs) -> PrepassSpec:
    """The pre-pass of a task from the keyword arguments lm-eval gives its ``custom_dataset`` hook (task
    metadata merged with ``--metadata``, then ``dataset_kwargs``: benchmark, method name, scoring, subject).

    Built once per process for the same arguments and data folder: lm-eval's hook, the runner's record lookup
    and ``medr2 prepare`` ask for the same spec, and a spec is immutable in use (a shard is a new one). A declared
    benchmark's spec is built afresh each time (its file may change under the same arguments)."""
    if not isinstance(benchmark, str) or data.benchmark(benchmark).declaration is not None:
        return build_spec(benchmark, **kwargs)
    try:
        arguments = json.dumps({"benchmark": benchmark, **kwargs}, sort_keys=True)
    except TypeError:  # not JSON (a caller's own object): nothing to key on
        return build_spec(benchmark, **kwargs)
    return _built(arguments, str(settings.data_dir()))


@lru_cache(maxsize=64)
def _built(arguments: str, _data_dir: str) -> PrepassSpec:
    return build_spec(**json.loads(arguments))


def build_spec(benchmark: str, method: str = "medr2", scoring: str = "letters", source: str = "local",
               data_dir: str | None = None, subject: str | None = None, limit: int | None = None,
               split: str | None = None, trained_items: list[str] | None = None,
               cases_file: str | dict | None = None, target: str | None = None,
               allow_embedded_roles: bool = False, threads: int | None = None, **metadata) -> PrepassSpec:
    """:func:`prepass_spec`, built now."""
    named = methods.method(method)
    if not named.retrieval:
        raise ConfigError(f"{benchmark}: method {method!r} has no pre-pass (retrieval methods: "
                          f"{', '.join(methods.retrieval_methods())})")
    if scoring not in methods.SCORINGS:
        raise ConfigError(f"{benchmark}: scoring {scoring!r}; valid: {', '.join(methods.SCORINGS)}")
    cfg = methods.resolve(method, metadata.pop("method_override", {}) or {}, f"{benchmark} method")
    if not isinstance(allow_embedded_roles, bool):
        raise ConfigError(f"{benchmark}: metadata allow_embedded_roles must be true or false, found "
                          f"{allow_embedded_roles!r}")
    roles_check = check_roles(cfg, target, allow_embedded_roles, f"{benchmark} {method}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit < 0):
        raise ConfigError(f"{benchmark}: metadata limit must be a number >= 0, found {limit!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ConfigError(f"{benchmark}: metadata threads must be a whole number >= 1, found {threads!r}")
    pools = data.pools(benchmark, source=source, data_dir=data_dir, cases_file=cases_file)
    eval_records = select(pools.eval, subject, split)
    refuse_trained(benchmark, eval_records, trained_items, limit)
    limited = bool(limit) and int(limit) < len(eval_records)
    rest = tuple(eval_records[int(limit):]) if limited else ()
    if limited:
        eval_records = eval_records[: int(limit)]
    demos = pools.demos[: cfg.max_demos] if cfg.max_demos is not None else pools.demos
    return PrepassSpec(benchmark, subject, split, source, cfg, list(eval_records), list(demos), limited, scoring, rest,
                       roles_check, threads or settings.threads())
