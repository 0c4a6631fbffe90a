"""The OpenAI-compatible backend against a local completions server that answers with the real embedded
Gemma (the protocol a served vLLM speaks): scores and generations must equal the local backend's."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local():
    from medr2_hooks.llm.hf import HFBackend

    return HFBackend("embedded:gemma-270m", batch_size=4)


def _prompt_logprobs(backend, text: str) -> tuple[list[float | None], list[int]]:
    enc = backend.tokenizer(text, return_offsets_mapping=True)
    ids = enc["input_ids"]
    with torch.no_grad():
        logits = backend.model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
    lps = [None] + [logits[i - 1, ids[i]].item() for i in range(1, len(ids))]
    offsets = [start for start, _ in enc["offset_mapping"]]
    return lps, offsets


@pytest.fixture(scope="module")
def server(local):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert self.path == "/v1/completions"
            prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
            if body.get("echo"):
                choices = []
                for i, p in enumerate(prompts):
                    lps, offsets = _prompt_logprobs(local, p)
                    choices.append({"index": i, "text": p, "logprobs": {"token_logprobs": lps, "text_offset": offsets}})
            else:
                texts = local.generate(prompts, body["max_tokens"], body.get("stop"))
                choices = [{"index": i, "text": t} for i, t in enumerate(texts)]
            payload = json.dumps({"choices": choices, "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_openai_backend_scores_like_the_local_model(server, local):
    from medr2_hooks.llm.openai_backend import OpenAIBackend

    remote = OpenAIBackend("gemma", base_url=server, tokenizer=local.path)
    prompts, conts = ["The capital of France is", "Question: What causes scurvy?\nAnswer:"], [" Paris", " vitamin"]
    got = remote.score(prompts, conts)
    want = local.score(prompts, conts)
    for (g, gn), (w, wn) in zip(got, want):
        assert gn == wn and g == pytest.approx(w, abs=1e-3)
    assert remote.generate(["The capital of France is"], 6, stop=["\n"]) == local.generate(["The capital of France is"], 6, stop=["\n"])
    assert remote.count_tokens(["Paris is nice"]) == local.count_tokens(["Paris is nice"])
