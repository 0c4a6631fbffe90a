"""A Med-R² pre-pass on the real embedded model whose every model and search call is recorded."""

from __future__ import annotations

import json

TINY = {"iterations": 2, "retrieve_k": 2, "coarse_k": 2, "conflict": {"top": 2}, "max_doc_tokens": 64,
        "cot_max_new_tokens": 12, "reformulate_max_new_tokens": 12, "max_demos": 1, "window": 2048}


class Recorder:
    """Wraps a backend and records every text it is sent, as ``("<method>:<role>", json args)``."""

    def __init__(self, inner, log):
        self.inner, self.log = inner, log
        self.model_id, self.usage = inner.model_id, inner.usage

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if name in ("generate", "score", "score_choices"):
            def call(*args, **kwargs):
                self.log.append((f"{name}:{kwargs.get('role', '')}", json.dumps(args, default=str)))
                return attr(*args, **kwargs)
            return call
        return attr


def _pipeline(tmp_path, log, **overrides):
    from medr2_hooks.cache import StageCache
    from medr2_hooks.llm import BackendPool
    from medr2_hooks.pipeline.config import MethodConfig
    from medr2_hooks.pipeline.toolbox import StageToolbox
    from medr2_hooks.retrieve.build import ensure_index
    from medr2_hooks.retrieve.searcher import Searcher

    pool = BackendPool()
    get = pool.get
    pool.get = lambda spec: Recorder(get(spec), log)
    searcher = Searcher.open(ensure_index("textbooks_demo"), retrievers=tuple(overrides.get("retrievers") or ())
                             or None)
    search = searcher.search
    searcher.search = lambda queries, **kw: (log.append(("search", json.dumps(queries))), search(queries, **kw))[1]
    cfg = MethodConfig.from_dict({**TINY, **overrides})
    return StageToolbox(cfg, cache=StageCache(tmp_path / "stages.sqlite"), pool=pool, searcher=searcher)


def _model_calls(log):
    return [entry for entry in log if entry[0] != "search"]


def one_run(tmp_path, method: str, override: str):
    """The one run of an experiment of ``method`` on 2 MedQA-USMLE items with the embedded Gemma target (the demo
    index built), ``override`` its method_override in YAML flow style: what a dry-run counts."""
    from medr2_hooks.experiments.config import load_experiment
    from medr2_hooks.experiments.expand import expand
    from medr2_hooks.retrieve.build import ensure_index

    ensure_index("textbooks_demo")
    path = tmp_path / f"{method}.yaml"
    path.write_text(f"name: {method}_counted\nmodels: [{{name: gemma-270m, model: 'embedded:gemma-270m'}}]\n"
                    f"methods: [{method}]\nbenchmarks: [medqa_usmle]\nlimit: 2\nmethod_override: {override}\n")
    (plan,) = expand(load_experiment(str(path)))
    return plan
