"""Issue 28: a launch of the paper configs measures what the paper measured: the target reasons and answers, S^c is
larger than the window, the corpus has the four source types, CoTs are not cut at a blank line, the retrieval query
is the paper's, no 270M role hides behind a GPU target, LLM-AMT reranks, served roles are identified by their
server's settings. Each test failed on 85cbdde."""

from __future__ import annotations


import pytest

from medr2_hooks.config import ConfigError
from medr2_hooks.experiments.config import load_experiment
from medr2_hooks.experiments.expand import expand

PAPER = ("table2", "table8", "table9", "table10", "figure4")


@pytest.mark.parametrize("name", PAPER)
def test_paper_configs_score_generatively_on_medcorp_with_candidates_beyond_the_window(name):
    exp = load_experiment(name)
    runs = expand(exp)
    assert exp.apply_chat_template  # for chat models; the paper's targets are base models (experiments/models.yaml)
    for run in runs:
        assert run.scoring == "generative" and not run.apply_chat_template, run.name
        assert run.task.endswith("_gen") or run.benchmark.startswith("rarearena"), run.task
        assert "max_length=" in run.model_args
    retrieval = [r for r in runs if "candidates" in r.resolved]
    assert retrieval
    for run in retrieval:
        got = run.resolved
        assert got["index"] == "medcorp" and got["query"] == "paper" and got["cot_max_new_tokens"] >= 512
        assert got["candidates"]["ratio"] >= 3 and got["candidates"]["tokens"] >= 3 * got["candidates"]["budget"]
        assert not [m for m in got["roles"].values() if m.startswith("embedded:")]
        assert run.metadata["method_override"]["answer_tokens"] == 1024  # the answer's room is kept out of packing


def pretrained_of_run(run) -> str:
    return next(a.split("=", 1)[1] for a in run.model_args.split(",") if a.startswith(("pretrained=", "model=")))


def test_table9s_4k_cells_are_table2s_runs():
    from medr2_hooks.prepass.spec import prepass_spec

    t2 = {(r.model, r.method, r.benchmark): r for r in expand(load_experiment("table2")) if r.window == 4096}
    t9 = [r for r in expand(load_experiment("table9")) if r.window == 4096]
    assert t9
    for run in t9:  # the very runs: same names (one results folder), settings and client, evaluated once
        assert run == t2[(run.model, run.method, run.benchmark)] and run.experiment == "table2"
    served = [r for r in expand(load_experiment("table9")) if r.model == "llama3.1-70b" and r.window > 4096]
    assert served and all(r.lm_model == "local-completions" for r in served)
    run = next(r for r in t9 if r.method == "medr2" and r.benchmark == "pubmedqa")
    keys = [prepass_spec(benchmark="pubmedqa", method="medr2", scoring="generative", limit=3,
                         **r.metadata).key for r in (run, t2[(run.model, "medr2", "pubmedqa")])]
    assert keys[0] == keys[1]
    windows = sorted((r.window, r.resolved["coarse_k"]) for r in expand(load_experiment("table9"))
                     if r.method == "medr2" and r.model == run.model and r.benchmark == "pubmedqa")
    assert [k for _, k in windows] == sorted(k for _, k in windows) and windows[-1][1] > windows[0][1]


def test_a_paper_config_whose_candidates_fit_the_window_is_refused(tmp_path):
    """The old Table 2 setting: 5 passages of up to 510 tokens for a 2,048-token budget."""
    old = tmp_path / "old_table2.yaml"
    old.write_text("name: old_table2\nmodels: [llama3.1-8b]\nmethods: [medr2]\nbenchmarks: [medqa_usmle]\n"
                   "method_override: {index: textbooks_bge, coarse: cross_encoder, coarse_k: 5}\npaper_table: '2'\n")
    with pytest.raises(ConfigError, match=r"S\^c \(5 passages\) holds 2550 tokens, 1.25x the 2048-token evidence "
                                          r"budget; a paper config needs 3.0x"):
        expand(load_experiment(str(old)))


def test_the_dry_run_shows_every_retrieval_runs_candidates():
    """Each run of ``medr2 sweep table9 --dry-run --json`` is its plan's ``to_json()`` with its cost (the README
    test runs that command; its cost is not what this checks, so the plan is read here without counting it)."""
    runs = [r.to_json() for r in expand(load_experiment("table9"))]
    by_window = {r["window"]: r["resolved"]["candidates"] for r in runs if r["method"] == "medr2"}
    assert set(by_window) == {4096, 8192, 16384, 32768, 65536, 131072}
    for window, got in by_window.items():
        assert got["budget"] == window // 2 and got["ratio"] >= 3, (window, got)


def test_the_paper_query_is_the_reformulation_then_the_cot():
    from medr2_hooks.reformulate import iteration_query

    q, reform = "Which antibiotic?", "antibiotic cell wall synthesis gonococcal arthritis"
    cot = "Gram-negative diplococci."
    assert iteration_query(q, reform, cot, 1, composition="paper") == reform
    assert iteration_query(q, reform, cot, 2, composition="paper") == f"{reform}\n{cot}"
    assert iteration_query(q, None, cot, 2, composition="paper") == f"{q}\n{cot}"  # no reformulator: the question
    assert iteration_query(q, reform, cot, 2) == f"{q}\n{reform}\n{cot}"  # question_first stays named


def test_the_paper_recipes_read_long_queries():
    from medr2_hooks.corpus.recipe import load_recipe

    for name in ("medcorp", "textbooks_bge"):
        recipe = load_recipe(name)
        assert recipe.splade.query_max_length == 512 and recipe.dense.max_length == 512


def test_cots_end_at_the_end_of_the_turn_not_at_a_blank_line():
    from medr2_hooks.cot import STOP

    assert "\n\n" not in STOP and "\nQuestion:" in STOP
    twin = load_experiment("table10_embedded")
    assert twin.method_override["cot_max_new_tokens"] <= 64  # the CPU twin keeps its short budget


# -- no silent tiny roles -----------------------------------------------------------------------------------------
def test_a_gpu_target_behind_embedded_roles_is_an_error_where_the_prepass_starts(data_root):
    from medr2_hooks.prepass.spec import prepass_spec, target_from_argv

    with pytest.raises(ConfigError, match=r"the target meta-llama/Llama-3.1-8B-Instruct is not an embedded model, "
                                          r"but role classifier \(embedded:gemma-270m\).*index textbooks_demo"):
        prepass_spec(benchmark="medqa_usmle", method="medr2", limit=2, target="meta-llama/Llama-3.1-8B-Instruct")
    allowed = prepass_spec(benchmark="medqa_usmle", method="medr2", limit=2, allow_embedded_roles=True,
                           target="meta-llama/Llama-3.1-8B-Instruct")
    assert allowed.roles_check["allowed"] and "role cot (embedded:gemma-270m)" in allowed.roles_check["embedded_parts"]
    assert prepass_spec(benchmark="medqa_usmle", method="medr2", limit=2, target="embedded:gemma-270m")
    # vanilla RAG calls no role: only its index and packing tokenizer are embedded
    with pytest.raises(ConfigError, match="the packing tokenizer"):
        prepass_spec(benchmark="medqa_usmle", method="vanilla_rag", limit=2, target="Qwen/Qwen2.5-7B-Instruct")
    # plain lm_eval never shows the model to the hook: it is read from lm_eval's own command line
    argv = ["lm_eval", "--model", "vllm", "--model_args", "pretrained=Qwen/Qwen2.5-7B-Instruct,dtype=bfloat16",
            "--tasks", "medqa_usmle_medr2"]
    assert target_from_argv(argv) == "Qwen/Qwen2.5-7B-Instruct"
    assert target_from_argv(["lm_eval", "--model=hf", "--tasks", "x"]) == "hf"
    assert target_from_argv(["pytest"]) is None


def test_medr2_eval_tells_the_prepass_its_target(monkeypatch):
    from medr2_hooks.lmeval import runner

    seen = {}
    monkeypatch.setattr(runner, "check_tasks", lambda tasks, metadata: (seen.update(metadata), 1 / 0))
    with pytest.raises(ZeroDivisionError):
        runner.run_eval(runner.EvalConfig(tasks=["medqa_usmle_medr2"], model="vllm",
                                          model_args="pretrained=meta-llama/Llama-3.1-8B-Instruct", wandb=False))
    assert seen["target"] == "meta-llama/Llama-3.1-8B-Instruct"


# -- served roles are identified by their server's settings ----------------------------------------------------------
@pytest.mark.slow
def test_a_served_roles_identity_holds_its_servers_settings():
    from medr2_hooks.llm.hf import HFBackend
    from medr2_hooks.llm.serve import start_background
    from medr2_hooks.pipeline.identity import backend_identity

    backend = HFBackend("embedded:smollm2-135m-instruct", batch_size=2)
    servers = []
    try:
        ids = []
        for context in (4096, 8192):  # a server restarted with another max_model_len (YaRN, Table 9)
            backend.max_length = context
            server, url = start_background(backend, "smol")
            servers.append(server)
            spec = {"backend": "openai", "model": "smol", "base_url": url}
            ids.append(backend_identity(spec, live=True))
        assert '"max_model_len":4096' in ids[0] and '"max_model_len":8192' in ids[1]
        plain = backend_identity({"backend": "openai", "model": "smol", "base_url": "http://h:1/v1"})
        declared = backend_identity({"backend": "openai", "model": "smol", "base_url": "http://h:1/v1",
                                     "server_args": {"max_model_len": 131072, "rope_scaling": "yarn"}})
        assert plain != declared and "#args=" in declared
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def test_reports_state_each_corpus_by_its_documents_source_types():
    from medr2_hooks.experiments.report_sections import corpus_line

    assert "(source types: book, entry, guideline, paper" in corpus_line("medcorp")  # the paper's four
    assert "(source types: book" in corpus_line("textbooks_demo")
    for papers in ("bioasq_gold", "pubmedqa_abstracts"):  # PubMed snippets and abstracts, not books
        assert "(source types: paper" in corpus_line(papers)
