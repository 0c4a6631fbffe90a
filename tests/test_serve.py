"""`medr2 serve` speaks what vLLM's server speaks to lm-eval's API models (issue 34) and survives its clients
(issue 31, points 10-14): every client mistake is a 400 naming the field, one bad request never fails or hangs the
others, work for a client that left stops, SIGTERM drains the requests in flight."""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

pytestmark = pytest.mark.slow  # a real model answers every request
SMOL = "embedded:smollm2-135m-instruct"


@pytest.fixture(scope="module")
def smol():
    from medr2_hooks.llm.hf import HFBackend

    return HFBackend(SMOL, batch_size=4)


@pytest.fixture(scope="module")
def server(smol):
    from medr2_hooks.llm.serve import start_background
    from medr2_hooks.llm.serve_protocol import Limits

    httpd, url = start_background(smol, "smol", limits=Limits(max_tokens=2048, max_prompts=8), max_body=64 * 1024)
    yield url
    httpd.shutdown()
    httpd.server_close()


def _post(url: str, path: str, body=None, raw: bytes | None = None, timeout: float = 120) -> tuple[int, dict]:
    r = requests.post(f"{url}/{path}", data=raw if raw is not None else json.dumps(body),
                      headers={"Content-Type": "application/json"}, timeout=timeout)
    return r.status_code, r.json()


BAD = [  # (body, the field the 400 names) -- each was a 500, a hang, a dead batcher or silently ignored on 85cbdde
    ({"prompt": "x", "stop": [["x"]]}, "stop"),
    ({"prompt": None}, "prompt"), ({"prompt": 5}, "prompt"), ({"prompt": ""}, "prompt"), ({"prompt": []}, "prompt"),
    ({"prompt": ["ok", None]}, "prompt[1]"), ({"prompt": [[1, -4]]}, "prompt[0]"),
    ({"prompt": "x", "stop": 5}, "stop"), ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "max_tokens": -3}, "max_tokens"), ({"prompt": "x", "max_tokens": 10**9}, "max_tokens"),
    ({"prompt": "x", "max_tokens": "5"}, "max_tokens"), ({"prompt": "x", "n": 5}, "n"),
    ({"prompt": "x", "temperature": 0.7}, "temperature"), ({"prompt": "x", "stream": True}, "stream"),
    ({"prompt": "x", "best_of": 3}, "unsupported field 'best_of'"), ({"prompt": "x", "logprobs": 50}, "logprobs"),
    ({"prompt": "x", "echo": "yes"}, "echo"), ({"prompt": "x", "model": "other"}, "model"),
    ({"prompt": ["a"] * 9}, "prompts in one request"), ({"prompt": "x", "seed": 1.5}, "seed"),
    ([1, 2], "JSON object"),
]


def test_client_mistakes_are_400s_naming_the_field(server):
    for body, field in BAD:
        status, answer = _post(server, "completions", body)
        assert status == 400 and field in answer["error"]["message"], (body, answer)
    for raw, what in ((b'{"prompt": "x", "max_tokens": 1e400}', "max_tokens"), (b"{nope", "not JSON"),
                      (b'{"prompt": "x", "max_tokens": NaN}', "NaN"), (b"\xff\xfe", "not JSON"),
                      # issue 39.7: each closed the connection without an answer on 5779058
                      (b'{"prompt": "lone \\ud800 surrogate"}', "lone UTF-16 surrogate"),
                      (b'{"prompt": "x", "stop": ' + b"[" * 5_000 + b"]" * 5_000 + b"}", "nested too deeply")):
        status, answer = _post(server, "completions", raw=raw)
        assert status == 400 and what in answer["error"]["message"], (raw, answer)
    status, answer = _post(server, "chat/completions", {"messages": [{"role": "robot", "content": "x"}]})
    assert status == 400 and "messages" in answer["error"]["message"]
    status, answer = _post(server, "chat/completions", raw=b'{"messages": [{"role": "user", "content": "\\udfff"}]}')
    assert status == 400 and "surrogate" in answer["error"]["message"]
    status, answer = _post(server, "completions", {"prompt": "x" * 70_000})
    assert status == 400 and "bytes; at most" in answer["error"]["message"]
    # still answering after all of that (the batcher thread is alive)
    status, answer = _post(server, "completions", {"prompt": "The capital of France is", "max_tokens": 3})
    assert status == 200 and answer["choices"][0]["text"]


def test_raw_socket_mistakes_never_hang_the_handler(server):
    host, port = server.removeprefix("http://").removesuffix("/v1").split(":")
    for head in (b"Content-Length: -5\r\n", b"Content-Length: 12abc\r\n", b""):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n")
            assert b" 400 " in s.recv(4096).split(b"\r\n")[0]
    with socket.create_connection((host, int(port)), timeout=10) as s:  # a body shorter than announced
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"")
        s.shutdown(socket.SHUT_WR)
        assert b" 400 " in s.recv(4096).split(b"\r\n")[0]


def test_lm_evals_echo_request_gets_prompt_and_generated_logprobs(server, smol):
    """lm-eval's local-completions asks `echo: true, logprobs: 1, max_tokens: 1` (85cbdde answered it with no
    logprobs: KeyError 'logprobs' in lm-eval); our backend asks max_tokens 0."""
    ids = smol.tokenizer("Question: what is 2+2?\nAnswer: 4")["input_ids"]
    for prompt in ("Question: what is 2+2?\nAnswer: 4", ids):
        status, answer = _post(server, "completions", {"prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 1,
                                                       "temperature": 0, "seed": 1234})
        assert status == 200
        lp = answer["choices"][0]["logprobs"]
        assert len(lp["token_logprobs"]) == len(ids) + 1 and lp["token_logprobs"][0] is None
        assert all(v <= 0 for v in lp["token_logprobs"][1:]) and lp["top_logprobs"][0] is None
        for tok, v, top in zip(lp["tokens"][1:], lp["token_logprobs"][1:], lp["top_logprobs"][1:]):
            assert top[tok] == v and max(top.values()) >= v  # the chosen token among the top, as vLLM does
    zero = _post(server, "completions", {"prompt": "Question: what is 2+2?\nAnswer: 4", "echo": True, "logprobs": 0,
                                         "max_tokens": 0})[1]["choices"][0]
    assert zero["text"] == "Question: what is 2+2?\nAnswer: 4" and len(zero["logprobs"]["token_logprobs"]) == len(ids)
    assert zero["logprobs"]["token_logprobs"] == pytest.approx(lp["token_logprobs"][:-1], abs=1e-4)


def test_stop_strings_and_batched_prompts(server):
    status, answer = _post(server, "completions", {"prompt": ["1, 2, 3, 4,", "a, b, c, d,"], "max_tokens": 12,
                                                   "stop": [","]})
    assert status == 200 and [c["index"] for c in answer["choices"]] == [0, 1]
    assert all("," not in c["text"] and c["finish_reason"] == "stop" for c in answer["choices"])
    assert answer["usage"]["prompt_tokens"] > 0 and answer["usage"]["completion_tokens"] >= 2


def test_every_valid_request_gets_its_answer_among_malformed_and_concurrent_ones(server):
    """The fuzz test: 180 requests on loopback, a third valid, from 12 threads at once; each valid one must get the
    answer it gets alone, each malformed one a 4xx, within 60 s."""
    rng = random.Random(7)
    prompts = [f"Count: {i}, {i + 1}," for i in range(8)]
    alone = {p: _post(server, "completions", {"prompt": p, "max_tokens": 2})[1]["choices"][0]["text"] for p in prompts}
    work = [("good", p) for p in prompts * 8]
    work += [("bad", rng.choice(BAD)[0]) for _ in range(100)] + [("raw", rng.choice([b"{", b"[]", b"\x00"]))
                                                                  for _ in range(16)]
    rng.shuffle(work)

    def one(item):
        kind, payload = item
        if kind == "good":
            status, answer = _post(server, "completions", {"prompt": payload, "max_tokens": 2}, timeout=60)
            return status == 200 and answer["choices"][0]["text"] == alone[payload]
        status, _ = _post(server, "completions", payload if kind == "bad" else None,
                          raw=payload if kind == "raw" else None, timeout=60)
        return 400 <= status < 500

    started = time.perf_counter()
    with ThreadPoolExecutor(12) as pool:
        outcomes = list(pool.map(one, work))
    assert all(outcomes) and len(work) == 180 and time.perf_counter() - started < 60


def test_a_client_that_leaves_stops_its_work(server):
    """A `max_tokens: 2000` request whose client left blocked every other request for minutes on 85cbdde."""
    def long_request():
        try:
            requests.post(f"{server}/completions", json={"prompt": "Once upon a time", "max_tokens": 2000}, timeout=1)
        except requests.Timeout:
            pass  # the client gives up and closes its connection

    threading.Thread(target=long_request).start()
    time.sleep(2)  # the long generation is running
    started = time.perf_counter()
    status, _ = _post(server, "completions", {"prompt": "Hello", "max_tokens": 2}, timeout=120)
    assert status == 200 and time.perf_counter() - started < 20


def test_many_clients_at_once_are_all_served(server):
    def get(_):
        return requests.get(f"{server}/models", timeout=30).status_code

    for _ in range(3):
        with ThreadPoolExecutor(40) as pool:
            assert set(pool.map(get, range(40))) == {200}


def test_an_api_key_guards_every_route(smol):
    from medr2_hooks.llm.serve import start_background

    httpd, url = start_background(smol, "smol", api_key="k-123")
    try:
        assert requests.get(f"{url}/models", timeout=10).status_code == 401
        assert requests.post(f"{url}/completions", json={"prompt": "x"}, timeout=10).status_code == 401
        ok = requests.post(f"{url}/completions", json={"prompt": "x", "max_tokens": 1},
                           headers={"Authorization": "Bearer k-123"}, timeout=60)
        assert ok.status_code == 200
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_sigterm_finishes_the_requests_in_flight(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "medr2_hooks.cli.main", "serve", "--model", SMOL, "--port",
                             str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + 300
        while True:
            try:
                requests.get(f"{url}/models", timeout=2)
                break
            except requests.ConnectionError:
                assert time.time() < deadline and proc.poll() is None
                time.sleep(0.5)
        got = {}
        thread = threading.Thread(target=lambda: got.update(r=requests.post(
            f"{url}/completions", json={"prompt": "Once upon a time", "max_tokens": 48}, timeout=120)))
        thread.start()
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        thread.join(120)
        assert got["r"].status_code == 200 and got["r"].json()["choices"][0]["text"]
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_lm_evals_local_completions_gives_hf_log_likelihoods(tmp_path):
    """Issue 34: `--model local-completions` against medr2 serve scores MedQA-USMLE as `hf-continuation` does
    (the same tokenizer and BOS: add_bos_token=True, as lm-eval's hf adds it for Gemma)."""
    from lm_eval import simple_evaluate

    from medr2_hooks.llm.embedded import resolve
    from medr2_hooks.llm.hf import HFBackend
    from medr2_hooks.llm.serve import start_background
    from medr2_hooks.lmeval.registry import task_manager
    from medr2_hooks.lmeval.runner import register_models

    path = resolve("embedded:gemma-270m")
    httpd, url = start_background(HFBackend("embedded:gemma-270m", batch_size=4), "gemma")
    register_models()
    args = dict(tasks=["medqa_usmle_direct"], limit=5, log_samples=True, task_manager=task_manager())
    try:
        served = simple_evaluate(model="local-completions", model_args=f"base_url={url}/completions,model=gemma,"
                                 f"tokenizer={path},add_bos_token=True,num_concurrent=2,max_retries=1", **args)
    finally:
        httpd.shutdown()
        httpd.server_close()
    local = simple_evaluate(model="hf-continuation", model_args=f"pretrained={path},dtype=float32", batch_size=4,
                            device="cpu", **args)
    a = [x[0][0] for r in served["samples"]["medqa_usmle_direct"] for x in r["resps"]]
    b = [x[0][0] for r in local["samples"]["medqa_usmle_direct"] for x in r["resps"]]
    assert len(a) == len(b) == 25 and max(abs(x - y) for x, y in zip(a, b)) < 1e-4
    assert served["results"]["medqa_usmle_direct"]["acc,none"] == local["results"]["medqa_usmle_direct"]["acc,none"]


def test_local_chat_completions_answers_as_hf_with_the_chat_template():
    from lm_eval import simple_evaluate

    from medr2_hooks.llm.embedded import resolve
    from medr2_hooks.llm.hf import HFBackend
    from medr2_hooks.llm.serve import start_background
    from medr2_hooks.lmeval.registry import task_manager

    httpd, url = start_background(HFBackend(SMOL, batch_size=2), "smol")
    args = dict(tasks=["medqa_usmle_direct_gen"], limit=3, log_samples=True, task_manager=task_manager(),
                apply_chat_template=True, gen_kwargs="max_gen_toks=24")
    try:
        served = simple_evaluate(model="local-chat-completions", model_args=f"base_url={url}/chat/completions,"
                                 "model=smol,num_concurrent=1,max_retries=1", **args)
    finally:
        httpd.shutdown()
        httpd.server_close()
    local = simple_evaluate(model="hf", model_args=f"pretrained={resolve(SMOL)},dtype=float32", batch_size=1,
                            device="cpu", **args)
    answers = [[r["resps"][0][0] for r in run["samples"]["medqa_usmle_direct_gen"]] for run in (served, local)]
    assert answers[0] == answers[1] and all(answers[0])


def test_a_served_role_still_works_through_our_backend(server):
    from medr2_hooks.llm.openai_backend import OpenAIBackend

    client = OpenAIBackend("smol", base_url=server, tokenizer=SMOL)
    scores = client.score(["The capital of France is"], [" Paris"])
    assert scores[0][0] < 0 and scores[0][1] == 1
    assert client.generate(["1, 2, 3,"], 3, stop=["\n"])[0].strip()


def test_a_served_target_runs_through_medr2_eval_with_its_chat_template(tmp_path, monkeypatch):
    """Issue 34.3: the rehearsal's served target — lm-eval's local-completions client against `medr2 serve`, the
    tokenizer named as an embedded model, the chat template applied, a generative task — through `medr2 eval`."""
    from medr2_hooks.llm.hf import HFBackend
    from medr2_hooks.llm.serve import start_background
    from medr2_hooks.lmeval.runner import EvalConfig, run_eval

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    httpd, url = start_background(HFBackend(SMOL, batch_size=2), SMOL)
    try:
        out = run_eval(EvalConfig(tasks=["medqa_usmle_direct_gen"], model="local-completions",
                                  model_args=f"model={SMOL},base_url={url}/completions,tokenizer={SMOL},"
                                             "num_concurrent=2,max_retries=1,max_length=4096",
                                  limit=1, gen_kwargs="max_gen_toks=16", apply_chat_template=True, wandb=False))
    finally:
        httpd.shutdown()
        httpd.server_close()
    row = out["samples"]["medqa_usmle_direct_gen"][0]
    assert row["arguments"]["gen_args_0"]["arg_0"].startswith("<|im_start|>")  # SmolLM2's chat template
    assert isinstance(row["resps"][0][0], str)
    record = out["run_record"]
    assert record["resolved"]["lm_eval_model"] == "local-completions" and record["resolved"]["batch_size"] == 1
    assert not record["resolved"]["model_args"]["tokenizer"].startswith("embedded:")  # resolved to its folder
