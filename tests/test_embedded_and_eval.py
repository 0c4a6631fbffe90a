"""The embedded Gemma-3-270M folder and a real lm-eval run through ``medr2 eval`` (offline, CPU)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_embedded_gemma_is_a_plain_safetensors_folder_with_chat_template(gemma_path):
    from pathlib import Path

    folder = Path(gemma_path)
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config
    assert (folder / "model.safetensors").is_file()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gemma_path)
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_embedded_smollm2_is_an_instruction_tuned_chat_model():
    from pathlib import Path

    from medr2_hooks.llm.embedded import resolve
    from medr2_hooks.llm.hf import HFBackend

    folder = Path(resolve("embedded:smollm2-135m-instruct"))
    assert (folder / "model.safetensors").is_file()
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    backend = HFBackend("embedded:smollm2-135m-instruct", batch_size=2)
    prompt = backend.chat("What is the capital of France? Answer in one word.")
    assert prompt.startswith("<|im_start|>") and prompt.endswith("<|im_start|>assistant\n")
    (reply,) = backend.generate([prompt], 8, stop=["\n"])
    assert "paris" in reply.lower()


def test_a_converted_model_is_the_same_folder_whatever_the_hub_setting(tmp_path):
    """A model's identity is its converted folder's content hash, in every cache key and run record. The tokenizer
    saved the converting process's HF_HUB_OFFLINE into its config, so `make` (which sets it) and a plain `medr2`
    run made two identities of one model; a folder converted that way is converted again."""
    import os
    import subprocess
    import sys

    from medr2_hooks.llm.embedded import _converted, resolve
    from medr2_hooks.llm.local import weights_revision

    code = ("from medr2_hooks.llm.embedded import resolve; from medr2_hooks.llm.local import weights_revision; "
            "print(weights_revision(resolve('embedded:smollm2-135m-instruct')))")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"} | {"MEDR2_CACHE_DIR": str(tmp_path)}
    online = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert online.returncode == 0, online.stderr[-2000:]
    assert online.stdout.split()[-1] == weights_revision(resolve("embedded:smollm2-135m-instruct"))

    folder = tmp_path / "models" / "smollm2-135m-instruct"
    assert _converted(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps(config | {"local_files_only": False}))
    assert not _converted(folder)  # converted before the fix: converted again at its next use


def test_embedded_gemma_knows_a_fact(gemma_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gemma_path)
    model = AutoModelForCausalLM.from_pretrained(gemma_path, dtype=torch.float32).eval()

    def logprob(prompt: str, continuation: str) -> float:
        ids = tok(prompt + continuation, return_tensors="pt").input_ids
        n_prompt = tok(prompt, return_tensors="pt").input_ids.shape[1]
        with torch.no_grad():
            logits = model(ids).logits[0, n_prompt - 1:-1]
        return logits.log_softmax(-1).gather(1, ids[0, n_prompt:, None]).sum().item()

    prompt = "The capital of France is"
    assert logprob(prompt, " Paris") > logprob(prompt, " Berlin") + 2


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    return tmp_path


def test_medr2_eval_writes_results_samples_and_offline_wandb(results_dir, gemma_path):
    from medr2_hooks.cli.main import main
    from medr2_hooks.lmeval import direct

    assert main(["eval", "--tasks", "medqa_usmle_direct,pubmedqa_direct", "--limit", "4", "--run_name", "t"]) == 0
    run_dir = results_dir / "runs" / "t"
    record = json.loads((run_dir / "run.json").read_text())
    assert record["resolved"]["model_args"]["pretrained"] == gemma_path
    assert record["resolved"]["batch_size"] == 4
    for task in ("medqa_usmle_direct", "pubmedqa_direct"):
        assert 0.0 <= record["results"][task]["acc,none"] <= 1.0
        assert record["n_samples"][task]["effective"] == 4
        (samples,) = run_dir.glob(f"*/samples_{task}_*.jsonl")
        rows = [json.loads(line) for line in samples.read_text().splitlines()]
        assert len(rows) == 4
        for row in rows:
            prompt = row["arguments"]["gen_args_0"]["arg_0"]
            assert prompt == direct.doc_to_text(row["doc"])
    assert list((results_dir / "wandb").glob("offline-run-*/run-*.wandb"))


def test_generative_variant_reports_invalid_rate(results_dir, gemma_path):
    from medr2_hooks.lmeval.runner import EvalConfig, run_eval

    results = run_eval(EvalConfig(tasks=["medqa_usmle_direct_gen"], limit=2, gen_kwargs="max_gen_toks=24",
                                  wandb=False, run_name="cot"))
    metrics = results["results"]["medqa_usmle_direct_gen"]
    assert metrics["invalid,none"] in (0.0, 0.5, 1.0)
    assert metrics["acc,none"] <= 1.0 - metrics["invalid,none"]
    for row in results["samples"]["medqa_usmle_direct_gen"]:
        prompt = row["arguments"]["gen_args_0"]["arg_0"]
        assert prompt.endswith("Let's think step by step, then finish with \"the answer is (X)\".")
