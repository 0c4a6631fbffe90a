"""Expand an experiment into runs, in the order that reuses the stage cache most.

Runs of one model are grouped; within a model, one benchmark's methods and windows follow each other with the
windows ascending, so every window after the first re-uses retrieval, reranking and CoT from the cache and
re-runs only packing and answering. Each run is one ``medr2 eval`` (one task) with a stable name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from .config import ABLATIONS, Experiment

RETRIEVAL = ("vanilla_rag", "llm_amt", "medr2", "medr2_cot") + ABLATIONS


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

    @property
    def name(self) -> str:
        return f"{self.experiment}__{self.model}__{self.method}__{self.benchmark}__w{self.window}"

    @property
    def tags(self) -> list[str]:
        return [f"model:{self.model}", f"method:{self.method}", f"benchmark:{self.benchmark}", f"window:{self.window}"]

    def to_json(self) -> dict:
        return {"name": self.name, **asdict(self)}


def _ablation_settings(method: str) -> dict:
    flags = method.removeprefix("ablation_")
    return {"method": method, "classify": "q" in flags, "reformulate": "q" in flags, "rerank": "r" in flags,
            "cot": "c" in flags}


def _task(method: str, benchmark: str) -> str:
    base = "medr2" if method.startswith("ablation_") else "direct" if method == "finetune" else method
    return f"{benchmark}_{base}"


def expand(exp: Experiment) -> list[Run]:
    runs = []
    for spec in exp.models:
        for benchmark in exp.benchmarks:
            for method in exp.methods:
                if method == "finetune" and not spec.finetuned:
                    continue  # no checkpoint for this model: the cell stays missing in the report
                windows = [w for w in sorted(exp.windows) if spec.max_window is None or w <= spec.max_window]
                for window in windows if method != "finetune" else windows[:1]:
                    metadata = dict(exp.metadata)
                    model_args, lm_model = spec.model_args, spec.model
                    if method == "finetune":  # the same direct task, on the checkpoint
                        checkpoint = Path(spec.finetuned).expanduser()
                        model_args = ",".join(a for a in (f"pretrained={checkpoint}", model_args) if a)
                        lm_model = "hf" if spec.model.startswith("embedded:") else spec.model
                    if method in RETRIEVAL:
                        override = {**exp.method_override, "window": window}
                        if spec.tokenizer:
                            override["target_tokenizer"] = spec.tokenizer
                        if method.startswith("ablation_"):
                            override.update(_ablation_settings(method))
                        metadata["method_override"] = override
                    if len(exp.windows) > 1 and spec.model != "embedded:gemma-270m":
                        model_args = ",".join(a for a in (model_args, f"max_length={window}") if a)
                    runs.append(Run(exp.name, spec.name, method, benchmark, window, _task(method, benchmark),
                                    lm_model, model_args, exp.limit, metadata))
    return runs
