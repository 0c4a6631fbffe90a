"""Each pipeline declares its stages once, in its own module; the run, the method registry, ``medr2 prepare`` and the
cost estimate read the declaration (issue 42), and nothing else lists a pipeline's stages, roles or shapes.

A :class:`Stage` is one cached, timed unit of a pre-pass: its name (the stage cache's and the record's
``stage_seconds`` key), the step it belongs to (the EBM steps classify → reformulate → retrieve → rerank → cot →
loop → apply, or a step of the pipeline's own; ``None`` for a stage that serves several), the roles whose models it
calls, what it reads and writes, the settings under which it runs and the shape of its cached value (a stored row of
valid JSON but another shape is counted as corrupt and recomputed: :func:`medr2_hooks.cache.conforms`). The stages
every method shares are declared once beside the toolbox that runs them (:mod:`.stages`).

A :class:`Pipeline` is a name, its ``prepare`` function, its stages and the steps of its own, registered with
:func:`register` on that function, as lm-eval registers models::

    @register("hyde", stages=(WRITE_PASSAGE, RETRIEVE, OWN_RANK, PACK), options=HydeOptions)
    def prepare(m, benchmark, questions, demos, scoring="letters", answer="default"): ...

The registry is lazy, as lm-eval's: pipeline ``name`` is the module ``medr2_hooks.pipeline.<name>``, imported the
first time it is asked for; the pipelines that exist are this package's modules that register one (:func:`known`).
A stage that runs without being declared for the method's settings is an error (:meth:`Pipeline.check_runs`), and
so is a declared stage that calls a model the cost estimate does not count
(:func:`medr2_hooks.experiments.cost.uncounted`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import import_module
from typing import Callable

EBM_STEPS = ("classify", "reformulate", "retrieve", "rerank", "cot", "loop", "apply")  # the paper's, in its order


def always(cfg) -> bool:
    return True


@dataclass(frozen=True)
class Stage:
    name: str  # the stage cache's and stage_seconds' key
    step: str | None  # the step it belongs to (Method.stages()); None: it serves several
    roles: tuple[str, ...]  # roles whose models it calls (none: retrieval, packing, embeddings)
    reads: str
    writes: str
    when: Callable = always  # MethodConfig -> whether the stage runs under these settings
    demos: bool = False  # asked over the demonstrations only (a run without any never calls it)
    shape: object = None  # its cached value's shape (medr2_hooks.cache.conforms); None: not cached

    def under(self, when: Callable, **changes) -> "Stage":
        """The same stage, run under other settings (or with other fields): how a pipeline reuses a shared one."""
        return replace(self, when=when, **changes)


@dataclass(frozen=True)
class Pipeline:
    name: str
    prepare: Callable  # (StageToolbox, benchmark, questions, demos, scoring, answer) -> (packs, record)
    stages: tuple[Stage, ...]
    steps_of_its_own: tuple[str, ...] = ()  # steps beside the EBM steps (LLM-AMT's augment and refine)
    options: type | None = None  # a frozen dataclass of the pipeline's own settings (MethodConfig.options)

    def __post_init__(self):
        valid = EBM_STEPS + self.steps_of_its_own
        for s in self.stages:
            if s.step is not None and s.step not in valid:
                raise ValueError(f"pipeline {self.name}, stage {s.name}: step must be one of {', '.join(valid)} "
                                 f"(a step of its own is declared with register(..., steps=...)), found {s.step!r}")

    def active(self, cfg) -> tuple[Stage, ...]:
        """The stages that run under ``cfg`` (a MethodConfig), in the order the pipeline runs them."""
        return tuple(s for s in self.stages if s.when(cfg))

    def steps(self, cfg) -> tuple[str, ...]:
        """The steps the active stages make up, in pipeline order."""
        out: list[str] = []
        for s in self.active(cfg):
            if s.step and s.step not in out:
                out.append(s.step)
        return tuple(out)

    def roles(self, cfg=None) -> tuple[str, ...]:
        """The roles the stages active under ``cfg`` call (every stage's without ``cfg``), in stage order."""
        stages = self.stages if cfg is None else self.active(cfg)
        return tuple(dict.fromkeys(r for s in stages for r in s.roles))

    def shape(self, cfg, name: str):
        """The declared shape of stage ``name``'s cached value under ``cfg``."""
        return next((s.shape for s in self.active(cfg) if s.name == name), None)

    def check_runs(self, cfg, name: str) -> None:
        """A stage about to run must be declared active for ``cfg``: code that grows a stage without its
        declaration fails here, before its work is cached, timed or left out of the estimate."""
        if name not in {s.name for s in self.active(cfg)}:
            raise RuntimeError(f"pipeline {self.name!r} ran stage {name!r}, which it does not declare for method "
                               f"{cfg.method!r}: add a Stage to its @register declaration "
                               f"(medr2_hooks/pipeline/{self.name}.py)")


_REGISTRY: dict[str, Pipeline] = {}


def register(name: str, stages: tuple[Stage, ...], steps: tuple[str, ...] = (), options: type | None = None):
    """Declares the decorated ``prepare`` function as pipeline ``name`` with ``stages``, the ``steps`` of its own and
    the dataclass of its own settings (``options``: a method config's ``options`` mapping, checked against it)."""
    def wrap(prepare: Callable) -> Callable:
        if name in _REGISTRY:
            raise ValueError(f"pipeline {name!r} registered twice")
        _REGISTRY[name] = Pipeline(name, prepare, tuple(stages), tuple(steps), options)
        return prepare

    return wrap


def known() -> tuple[str, ...]:
    """Every registered pipeline: each module of this package is imported once (as lm-eval scans its task folders),
    and the ones that ``@register`` are the pipelines."""
    for name in _modules():
        import_module(f"{__package__}.{name}")
    return tuple(_REGISTRY)


def pipeline(name: str) -> Pipeline:
    """The registered pipeline ``name`` (importing ``medr2_hooks.pipeline.<name>``, which registers it)."""
    if name not in _REGISTRY and name in _modules():
        import_module(f"{__package__}.{name}")
    if name not in _REGISTRY:
        raise ValueError(f"pipeline must be one of {', '.join(known())}, found {name!r}")
    return _REGISTRY[name]


@lru_cache(maxsize=1)
def _modules() -> tuple[str, ...]:
    """The modules of this package, listed once (every MethodConfig checks its pipeline and roles against them)."""
    import pkgutil
    from pathlib import Path

    return tuple(sorted(info.name for info in pkgutil.iter_modules([str(Path(__file__).parent)])))


def all_roles() -> tuple[str, ...]:
    """Every role some pipeline's stage calls, in declaration order: the roles a method config may name."""
    return tuple(dict.fromkeys(r for name in known() for r in pipeline(name).roles()))
