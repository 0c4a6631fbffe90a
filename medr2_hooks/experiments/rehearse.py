"""Dress rehearsal of a paper experiment where no GPU is at hand: ``medr2 sweep <config> --rehearse``.

The rehearsal keeps the experiment's grid shape (every model, method and window; by default one benchmark and a
few items) and the interfaces a GPU run goes through, with each model replaced by an embedded stand-in:

- each target is evaluated by lm-eval's ``hf`` model on a stand-in (LLaMA targets: Gemma-3-270M base; Qwen
  targets: SmolLM2-135M-Instruct), so the model axis still has two different models; a *served* target
  (``local-completions`` against ``vllm serve``) stays served: lm-eval's same client against its stand-in's
  ``medr2 serve``, the server its roles use;
- each *served* role stays served: every endpoint of the target's role set (``roles.yaml``) becomes a ``medr2
  serve`` process over its stand-in (instruction-tuned judges, M_F, classifier, reformulator: SmolLM2-Instruct;
  base-model usefulness proxies: Gemma base; a target's own CoT server: the target's stand-in), reached through
  the same OpenAI-compatible client, concurrency and batching as ``vllm serve``;
- a window larger than the stand-in's context, or than the rehearsal's ``window_cap`` (CPU time), is packed at
  that cap (the run keeps the paper's window label; the report says which cells were capped);
- the paper's GPU-only retrieval pieces (the BGE index, the cross-encoder coarse reranker, the target's hub
  tokenizer) give way to the defaults (the embedded ``textbooks_demo`` index, the LLM coarse judge, the stand-in's
  tokenizer), and the loop is CPU-sized (experiments/settings.yaml ``cpu_rehearsal``; its retrieve_k and coarse_k
  are caps).

Nothing here is a result about the paper's models: the report says so on its first line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import data
from ..config import ConfigError
from .config import Experiment, ModelSpec, role_set
from .expand import pretrained_of
from ..lmeval.runner import SERVED_MODELS

GEMMA, SMOLLM = "embedded:gemma-270m", "embedded:smollm2-135m-instruct"
CONTEXT = {GEMMA: 32768, SMOLLM: 8192}  # max_position_embeddings of the stand-ins
PORTS = {GEMMA: 18270,
         SMOLLM: 18135}  # fixed, so the served roles' ids (model@url) and the stage cache survive restarts
CAPS = ("retrieve_k", "coarse_k")  # of experiments/settings.yaml's cpu_rehearsal: at most these, not exactly
CPU_GEN_TOKENS = 48  # a generative target's answer (the paper setting's 1024 would take minutes an item here)
GPU_ONLY = ("index", "coarse", "target_tokenizer")  # BGE index, cross-encoder reranker, the target's hub tokenizer
# finetune cells: the checkpoint of the CPU recipe trained on the answers the cells read (letters / generative)
CPU_FINETUNED = {"letters": "~/.cache/medr2/finetune/cpu_usmle_dev_slice/final",
                 "generative": "~/.cache/medr2/finetune/cpu_usmle_dev_slice_gen/final"}


@dataclass(frozen=True)
class Plan:
    limit: int = 3
    benchmarks: tuple[str, ...] = ()  # default: the experiment's first benchmark
    # the most tokens a rehearsal packs (and so the longest prompts its stand-ins read): a 32K prompt costs a
    # 270M model on 2 CPU cores minutes per forward pass, and a pre-pass makes dozens of them
    window_cap: int = 4096
    models: tuple[str, ...] = ()  # default: every model (targets sharing a stand-in repeat the same computation)
    port_offset: int = 0  # added to PORTS (two rehearsals on one machine)

    def port(self, stand_in: str) -> int:
        return PORTS[stand_in] + self.port_offset

    def __post_init__(self):
        if self.limit < 1 or self.window_cap < 512:
            raise ValueError(f"--limit must be >= 1 and --window-cap >= 512, found {self.limit}, {self.window_cap}")


def target_stand_in(spec: ModelSpec) -> str:
    if spec.model.startswith("embedded:"):
        return spec.model
    hub = f"{spec.model_args} {spec.tokenizer or ''} {spec.name}".lower()
    return SMOLLM if "qwen" in hub else GEMMA


def served_stand_in(server: dict, target: ModelSpec, target_stand: str) -> str:
    """The stand-in of one served endpoint: the target's own (its CoT server), an instruction-tuned judge or a
    base-model proxy."""
    model = server.get("model", "")
    if model in (pretrained_of(target), target.tokenizer):
        return target_stand
    return SMOLLM if "instruct" in model.lower() or "chat" in model.lower() else GEMMA


def served_target(stand_in: str, plan: Plan) -> str:
    """model_args of a served target's rehearsal: lm-eval's same client (local-completions) against its stand-in's
    ``medr2 serve``, the server its roles use too (as the GPU target shares its CoT role's vllm serve)."""
    bos = ",add_bos_token=True" if stand_in == GEMMA else ""  # as lm-eval's hf model adds Gemma's BOS
    return (f"model={stand_in},base_url=http://127.0.0.1:{plan.port(stand_in)}/v1/completions,tokenizer={stand_in},"
            f"num_concurrent=2,max_retries=1{bos}")


def _served(stand_in: str, server: dict, plan: Plan) -> dict:
    return {"backend": "openai", "model": stand_in, "tokenizer": stand_in, "max_length": CONTEXT[stand_in],
            "base_url": f"http://127.0.0.1:{plan.port(stand_in)}/v1", "concurrency": server.get("concurrency", 4)}


def cpu_sizes() -> tuple[dict, dict]:
    """The rehearsal's loop and its candidate caps, from experiments/settings.yaml (``cpu_rehearsal``)."""
    from .config import named_setting

    sizes = named_setting("cpu_rehearsal", "medr2 sweep --rehearse")["method_override"]
    return {k: v for k, v in sizes.items() if k not in CAPS}, {k: sizes[k] for k in CAPS}


def _cpu_sized(override: dict) -> dict:
    loop, caps = cpu_sizes()
    out = {k: v for k, v in override.items() if k not in GPU_ONLY}
    for key, most in caps.items():
        if key in out or key == "retrieve_k":
            out[key] = min(out.get(key, most), most)
    return {**out, **loop}


def rehearsal(exp: Experiment, plan: Plan) -> Experiment:
    """The experiment as rehearsed on embedded stand-ins (named ``<name>_rehearsal``)."""
    if exp.rehearsal:
        raise ConfigError(f"{exp.name} is already a rehearsal")
    benchmarks = list(plan.benchmarks or exp.benchmarks[:1])
    bad = [b for b in benchmarks if b not in exp.benchmarks]
    if bad:
        raise ConfigError(f"--benchmarks: {bad[0]!r} is not in {exp.name} ({', '.join(exp.benchmarks)})")
    unknown = [m for m in plan.models if m not in {spec.name for spec in exp.models}]
    if unknown:
        raise ConfigError(f"--models: {unknown[0]!r} is not in {exp.name} ({', '.join(s.name for s in exp.models)})")
    models, mapping = [], {}
    for spec in exp.models:
        if plan.models and spec.name not in plan.models:
            continue
        stand = target_stand_in(spec)
        roles = None
        if spec.role_set or spec.roles:
            declared = spec.roles or role_set(spec.role_set)
            roles = {"llm": _served(served_stand_in(declared["llm"], spec, stand), declared["llm"], plan),
                     "roles": {r: _served(served_stand_in(s, spec, stand), s, plan)
                               for r, s in declared["roles"].items()}}
        cap = min(CONTEXT[stand], plan.window_cap)
        served = spec.model in SERVED_MODELS
        models.append(ModelSpec(name=spec.name, model=spec.model if served else stand,
                                model_args=served_target(stand, plan) if served else "", roles=roles,
                                pack_window_cap=cap,
                                finetuned=CPU_FINETUNED[exp.scoring] if "finetune" in exp.methods else None))
        mapping[spec.name] = {"target": spec.model_args or spec.model, "stand_in": stand, "pack_window_cap": cap,
                              "served": served,
                              "roles": {r: s["model"] for r, s in ({"llm": roles["llm"], **roles["roles"]}.items()
                                                                 if roles else [])}}
    # a served judge (RareArena's GPT-4o) becomes the instruction-tuned stand-in, served and reached through chat
    graded = any(data.benchmark(b).style == "diagnosis" for b in benchmarks)
    judge = {**_served(SMOLLM, exp.judge, plan), "api": "chat"} if exp.judge and graded else None
    capped = sorted({w for w in exp.windows for m in models if w > m.pack_window_cap})
    return replace(
        exp, name=f"{exp.name}_rehearsal", models=models, benchmarks=benchmarks, limit=plan.limit,
        candidate_ratio=None, gen_kwargs=f"max_gen_toks={CPU_GEN_TOKENS}" if exp.gen_kwargs else None,
        method_override=_cpu_sized(exp.method_override),
        method_overrides={m: _cpu_sized(o) for m, o in exp.method_overrides.items()}, finetune={},
        allow_embedded_roles=False, judge=judge, cells_from={},  # a rehearsal runs all of its own cells
        description=f"Rehearsal of {exp.name}: the grid of the paper config on embedded stand-ins ({plan.limit} items "
                    f"of {', '.join(benchmarks)}); accuracies say nothing about the paper's models.",
        rehearsal={"of": exp.name, "plan": {"limit": plan.limit, "benchmarks": benchmarks,
                                            "window_cap": plan.window_cap,
                            "models": [m.name for m in models]},
                   "models": mapping, "judge": exp.judge, "servers": {m: plan.port(m) for m in CONTEXT},
                   "windows_capped": capped, "cpu_loop": cpu_sizes()[0], "cpu_k": cpu_sizes()[1],
                   "candidate_ratio": exp.candidate_ratio, "gen_kwargs": exp.gen_kwargs,
                   "replaced": {k: exp.method_override[k] for k in GPU_ONLY if k in exp.method_override}})


def servers_needed(exp: Experiment) -> list[str]:
    """The stand-ins that the rehearsal's roles reach over HTTP (one ``medr2 serve`` each)."""
    used = {s["model"] for m in exp.models if m.roles for s in [m.roles["llm"], *m.roles["roles"].values()]}
    targets = {pretrained_of(m) for m in exp.models if m.model in SERVED_MODELS}
    return sorted(used | targets | ({exp.judge["model"]} if exp.judge else set()))
