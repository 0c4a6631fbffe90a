"""Each pipeline declares its stages once; the run, the method registry, ``medr2 prepare`` and the cost estimate read
the declaration (issue 42).

A :class:`Stage` is one cached, timed unit of a pre-pass: its name (the stage cache's and the record's
``stage_seconds`` key), the EBM step it belongs to (classify → reformulate → retrieve → rerank → cot → loop →
apply; ``None`` for a stage that serves several), the roles whose models it calls, what it reads and writes, and
the settings under which it runs. A :class:`Pipeline` is a name, its ``prepare`` function and its stages, registered
with :func:`register` on that function, as lm-eval registers models::

    @register("medr2", stages=(Stage("classify", "classify", ("classifier",), ...), ...))
    def prepare(m, benchmark, questions, demos, scoring="letters", answer="default"): ...

The registry is lazy, as lm-eval's: :data:`MODULES` names the module that registers each pipeline, imported the
first time the pipeline is asked for. A stage that runs without being declared for the method's settings is an
error (:meth:`Pipeline.check_runs`), and so is a declared stage that calls a model the cost estimate does not count
(:func:`medr2_hooks.experiments.cost.uncounted`).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Callable

# the pipelines and the module whose @register declares each (imported on first use: no import at load time)
MODULES = {"medr2": "medr2_hooks.pipeline.run", "llm_amt": "medr2_hooks.pipeline.llm_amt"}
STEPS = ("augment", "classify", "reformulate", "retrieve", "rerank", "refine", "cot", "loop", "apply")


def always(cfg) -> bool:
    return True


@dataclass(frozen=True)
class Stage:
    name: str  # the stage cache's and stage_seconds' key
    step: str | None  # the EBM step it belongs to (Method.stages()); None: it serves several
    roles: tuple[str, ...]  # roles whose models it calls (none: retrieval, packing, embeddings)
    reads: str
    writes: str
    when: Callable = always  # MethodConfig -> whether the stage runs under these settings
    demos: bool = False  # asked over the demonstrations only (a run without any never calls it)

    def __post_init__(self):
        if self.step is not None and self.step not in STEPS:
            raise ValueError(f"stage {self.name}: step must be one of {', '.join(STEPS)}, found {self.step!r}")


@dataclass(frozen=True)
class Pipeline:
    name: str
    prepare: Callable  # (MedR2, benchmark, questions, demos, scoring, answer) -> (packs, record)
    stages: tuple[Stage, ...]

    def active(self, cfg) -> tuple[Stage, ...]:
        """The stages that run under ``cfg`` (a MethodConfig), in the order the pipeline runs them."""
        return tuple(s for s in self.stages if s.when(cfg))

    def steps(self, cfg) -> tuple[str, ...]:
        """The EBM steps the active stages make up, in pipeline order."""
        out: list[str] = []
        for s in self.active(cfg):
            if s.step and s.step not in out:
                out.append(s.step)
        return tuple(out)

    def roles(self, cfg) -> set[str]:
        return {r for s in self.active(cfg) for r in s.roles}

    def check_runs(self, cfg, name: str) -> None:
        """A stage about to run must be declared active for ``cfg``: code that grows a stage without its
        declaration fails here, before its work is cached, timed or left out of the estimate."""
        if name not in {s.name for s in self.active(cfg)}:
            raise RuntimeError(f"pipeline {self.name!r} ran stage {name!r}, which it does not declare for method "
                               f"{cfg.method!r}: add a Stage to its @register declaration (medr2_hooks.pipeline)")


_REGISTRY: dict[str, Pipeline] = {}


def register(name: str, stages: tuple[Stage, ...]):
    """Declares the decorated ``prepare`` function as pipeline ``name`` with ``stages``."""
    if name not in MODULES:
        raise ValueError(f"pipeline {name!r} is not listed in medr2_hooks.pipeline.declare.MODULES")

    def wrap(prepare: Callable) -> Callable:
        if name in _REGISTRY:
            raise ValueError(f"pipeline {name!r} registered twice")
        _REGISTRY[name] = Pipeline(name, prepare, tuple(stages))
        return prepare

    return wrap


def pipeline(name: str) -> Pipeline:
    """The registered pipeline ``name`` (importing the module that declares it)."""
    if name not in MODULES:
        raise ValueError(f"pipeline must be one of {', '.join(MODULES)}, found {name!r}")
    if name not in _REGISTRY:
        import_module(MODULES[name])
    if name not in _REGISTRY:
        raise RuntimeError(f"{MODULES[name]} does not @register pipeline {name!r}")
    return _REGISTRY[name]
