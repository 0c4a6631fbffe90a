"""The OpenAI-compatible backend against a local completions server that answers with the real embedded
Gemma (the protocol a served vLLM speaks): scores and generations must equal the local backend's."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local():
    from medr2_hooks.llm.hf import HFBackend

    return HFBackend("embedded:gemma-270m", batch_size=4)


@pytest.fixture(scope="module")
def server(local):
    from medr2_hooks.llm.serve import start_background

    httpd, url = start_background(local, "gemma")
    httpd.url = url
    yield httpd
    httpd.shutdown()


def test_openai_backend_scores_like_the_local_model(server, local):
    from medr2_hooks.llm.openai_backend import OpenAIBackend

    remote = OpenAIBackend("gemma", base_url=server.url, tokenizer=local.path)
    prompts, conts = ["The capital of France is", "Question: What causes scurvy?\nAnswer:"], [" Paris", " vitamin"]
    got = remote.score(prompts, conts)
    want = local.score(prompts, conts)
    for (g, gn), (w, wn) in zip(got, want):
        assert gn == wn and g == pytest.approx(w, abs=1e-3)
    assert remote.generate(["The capital of France is"], 6,
                           stop=["\n"]) == local.generate(["The capital of France is"], 6, stop=["\n"])
    assert remote.count_tokens(["Paris is nice"]) == local.count_tokens(["Paris is nice"])


def test_concurrent_requests_are_merged_into_model_batches_and_keep_their_order(server, local):
    from medr2_hooks.llm.openai_backend import OpenAIBackend

    prompts = [f"Question: What is {x}?\nAnswer:" for x in ("scurvy", "rickets", "beriberi", "pellagra", "anemia",
                                                            "gout", "asthma", "sepsis")]
    serial = OpenAIBackend("gemma", base_url=server.url, concurrency=1, request_batch=1).score(prompts, [" a"] * 8)
    calls = server.batcher.calls
    parallel = OpenAIBackend("gemma", base_url=server.url, concurrency=8, request_batch=1)
    got = parallel.score(prompts, [" a"] * 8)
    assert [n for _, n in got] == [n for _, n in serial]
    assert [lp for lp, _ in got] == pytest.approx([lp for lp, _ in serial], abs=1e-4)
    assert server.batcher.calls - calls < 8  # eight requests in flight became fewer model calls
    usage = parallel.usage.to_json()
    assert usage["prompts"] == 8 and usage["calls"] == 1 and usage["by_role"] == {"score": 8}


class _Flaky(BaseHTTPRequestHandler):
    """Fails the first ``failures`` requests with ``status``, then answers one generation."""

    failures, status, seen = 2, 503, 0

    def log_message(self, *args):
        pass

    def do_POST(self):
        type(self).seen += 1
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if type(self).seen <= type(self).failures:
            payload, code = b'{"error": "busy"}', type(self).status
        else:
            payload, code = json.dumps({"choices": [{"index": i, "text": " ok"} for i, _ in enumerate(body["prompt"])],
                                        "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode(), 200
        self.send_response(code)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.mark.parametrize("status, failures, succeeds", [(503, 2, True), (429, 1, True), (400, 1, False)])
def test_transient_errors_are_retried_and_others_name_the_role(status, failures, succeeds):
    from medr2_hooks.llm.openai_backend import EndpointError, OpenAIBackend

    handler = type("Handler", (_Flaky,), {"failures": failures, "status": status, "seen": 0})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    backend = OpenAIBackend("m", base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1", backoff=0.01)
    try:
        if succeeds:
            assert backend.generate(["Say ok"], 2, role="reformulator") == [" ok"]
            assert handler.seen == failures + 1
        else:
            with pytest.raises(EndpointError, match="role 'reformulator'.*HTTP 400"):
                backend.generate(["Say ok"], 2, role="reformulator")
            assert handler.seen == 1  # a client error is not retried
    finally:
        httpd.shutdown()
