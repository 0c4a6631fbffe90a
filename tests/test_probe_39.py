"""Issue 39: what the third adversarial probe found on 5779058, each closed. Secrets: a password in a URL reaches
no key, field, message or file (the end-to-end sweep of every byte written is the slow test at the end); nothing
cached that was never an answer; one-line errors instead of tracebacks on `medr2 serve`, `medr2 evidence`, the
judge's endpoint and `--throughput`. Each test failed on 5779058."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from medr2_hooks.cli.main import main

PASSWORD = "pw-PLANTED-39-secret"
FIXTURE = Path(__file__).parent / "fixtures" / "rarearena"


@pytest.fixture
def endpoint():
    """An OpenAI-compatible endpoint whose next answers the test sets (``answers``: JSON bodies, the last repeated):
    a gateway that answers 200 with something other than choices, or a model that answers ``content: null``."""
    state = {"answers": [], "asked": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def _send(self, body: dict) -> None:
            raw = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):
            self._send({"object": "list", "data": [{"id": "judge", "root": "judge", "max_model_len": 8192}]})

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            state["asked"] += 1
            answers = state["answers"]
            self._send(answers.pop(0) if len(answers) > 1 else answers[0])

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state["public"] = f"http://127.0.0.1:{server.server_address[1]}/v1"
    state["url"] = state["public"].replace("http://", f"http://user:{PASSWORD}@")
    yield state
    server.shutdown()
    server.server_close()


def _chat(content) -> dict:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}], "usage": {}}


# -- 1, 2. a password in a URL: no key, identity, field or message holds it ------------------------------------------
def test_redaction_reaches_keys_and_backends_name_their_endpoint_without_credentials():
    from medr2_hooks.llm.openai_backend import OpenAIBackend
    from medr2_hooks.redact import redact

    url = f"http://user:{PASSWORD}@127.0.0.1:9/v1"
    usage = {f"served@{url}": {"calls": 1}, "plain": {f"k@{url}": url}}
    assert PASSWORD not in json.dumps(redact(usage))
    backend = OpenAIBackend("served", base_url=url, max_retries=0, timeout=2)
    assert backend.model_id == "served@http://127.0.0.1:9/v1"
    with pytest.raises(Exception) as err:  # nothing listens on port 9
        backend.generate(["hello"], max_new_tokens=1, role="cot")
    assert "127.0.0.1:9/v1/completions" in str(err.value) and PASSWORD not in str(err.value)


def test_a_judge_url_with_credentials_is_refused_without_showing_them():
    from medr2_hooks.config import ConfigError
    from medr2_hooks.lmeval.judge import check_judge

    for url in (f"http://user:{PASSWORD}@host/v1", f"http://host/v1?api_key={PASSWORD}"):
        with pytest.raises(ConfigError, match="judge.base_url carries credentials") as err:
            check_judge("rarearena_rds", {"backend": "openai", "api": "chat", "model": "gpt-4o", "base_url": url})
        assert PASSWORD not in str(err.value) and "http://host/v1" in str(err.value)
    assert check_judge("rarearena_rds", {"backend": "openai", "model": "m", "base_url": "http://host/v1"})


# -- 3, 9. the judge's replies: an empty one is never cached, a reply without choices is one line ------------------
def test_an_empty_judge_reply_is_counted_and_asked_again_once_the_endpoint_is_fixed(endpoint, tmp_path):
    from medr2_hooks.cache import StageCache
    from medr2_hooks.lmeval.judge_client import Case, Judge

    cases = [Case("Fabry disease", None, "Fabry disease", ("Fabry disease", "Gaucher disease"))]
    spec = {"backend": "openai", "api": "chat", "model": "judge", "base_url": endpoint["url"], "max_retries": 0}
    cache = StageCache(tmp_path / "stages.sqlite")
    endpoint["answers"] = [_chat(None)]
    first = Judge.from_spec(spec, cache).grade(cases)[0]
    assert first["complete"] is False and first["grades"] == [0, 0] and first["judge"] == f"judge@{endpoint['public']}"
    assert PASSWORD not in json.dumps(first)
    endpoint["answers"] = [_chat("1. Fabry disease: score 2\n2. Gaucher disease: score 0")]
    again = Judge.from_spec(spec, cache).grade(cases)[0]
    assert endpoint["asked"] == 2 and again["complete"] and again["grades"] == [2, 0]
    Judge.from_spec(spec, cache).grade(cases)  # a complete grading is kept: not asked a third time
    assert endpoint["asked"] == 2


@pytest.mark.parametrize("body", [{}, {"error": "upstream"}, {"choices": "none"}, {"choices": [{"index": 0}]}, []])
def test_an_endpoint_that_answers_without_choices_is_a_one_line_error(endpoint, body):
    from medr2_hooks.llm.openai_backend import EndpointError, OpenAIBackend

    endpoint["answers"] = [body]
    for api in ("chat", "completions"):
        backend = OpenAIBackend("judge", base_url=endpoint["url"], api=api, max_retries=0)
        with pytest.raises(EndpointError, match="answered without OpenAI choices") as err:
            backend.generate(["grade this"], max_new_tokens=4, role="judge")
        assert PASSWORD not in str(err.value) and "\n" not in str(err.value)


# -- 4. a model without a language-model head is refused wherever a generator loads ---------------------------------
@pytest.mark.slow
def test_a_sentence_encoder_is_refused_as_a_generator(tmp_path):
    from medr2_hooks.errors import Medr2Error
    from medr2_hooks.llm.hf import HFBackend

    with pytest.raises(Medr2Error, match="not a trained causal language model.*initialised .* afresh"):
        HFBackend("embedded:minilm")
    done = subprocess.run([sys.executable, "-m", "medr2_hooks.cli.main", "serve", "--model", "embedded:minilm",
                           "--port", "0"], capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "no language-model head" in done.stderr and "Traceback" not in done.stderr


# -- 7. medr2 serve: mistakes found before the model loads, and requests no handler can read ------------------------
def test_serve_startup_mistakes_are_one_line_errors_before_any_model_loads(tmp_path):
    import time

    medr2 = [sys.executable, "-m", "medr2_hooks.cli.main", "serve", "--model", "embedded:gemma-270m"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        started = time.perf_counter()
        done = subprocess.run([*medr2, "--port", str(port)], capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and f"cannot listen on 127.0.0.1:{port}" in done.stderr
        assert "Traceback" not in done.stderr and time.perf_counter() - started < 30  # no model was loaded
    done = subprocess.run([*medr2, "--port", "70000"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "must be >= 0 and <= 65535" in done.stderr
    empty = tmp_path / "no-model"
    empty.mkdir()
    done = subprocess.run([*medr2[:-2], "--model", str(empty), "--port", "0"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0 and "holds no model" in done.stderr and "Traceback" not in done.stderr


# -- 5, 8. medr2 evidence: nothing scored is an error, a damaged run folder a one-line error --------------------------
def _run_folder(tmp_path: Path, docs: list[str], stages=("retrieved.final", "packed"), **prepass) -> Path:
    folder = tmp_path / "runs" / "r1"
    trec = folder / "stage_runs"
    trec.mkdir(parents=True)
    for stage in stages:
        (trec / f"{stage}.trec").write_text("".join(f"q1 Q0 {d} {i} {10 - i} r1\n" for i, d in enumerate(docs, 1)))
    pre = {"method": "vanilla_rag", "benchmark": "bioasq_yn", "index": {"name": "bioasq_gold"},
           "stage_runs": {"folder": str(trec), "stages": list(stages)}, "identity": {"eval_ids": ["q1"]}} | prepass
    (folder / "run.json").write_text(json.dumps({"prepass": {"bioasq_yn_vanilla_rag": pre}}))
    return folder


def _bioasq_question_and_gold() -> tuple[str, list[str]]:
    from medr2_hooks.evidence.collections import collection

    qid, docs = next(iter(collection("bioasq_gold").qrels().items()))
    return qid, list(docs)


def test_evidence_refuses_what_it_cannot_score(tmp_path, capsys):
    qid, gold = _bioasq_question_and_gold()
    # document ids from another corpus: every score would be 0
    folder = _run_folder(tmp_path, ["textbook_1", "textbook_2"], identity={"eval_ids": [qid]})
    run_json = json.loads((folder / "run.json").read_text())
    trec = Path(run_json["prepass"]["bioasq_yn_vanilla_rag"]["stage_runs"]["folder"])
    for stage in ("retrieved.final", "packed"):
        (trec / f"{stage}.trec").write_text(f"{qid} Q0 textbook_1 1 2.0 r1\n")
    assert main(["evidence", str(folder)]) == 2
    assert "none of the 1 documents it ranked is judged in collection 'bioasq_gold'" in capsys.readouterr().err
    # an unknown stage names the stages the run recorded
    for stage in ("retrieved.final", "packed"):
        (trec / f"{stage}.trec").write_text(f"{qid} Q0 {gold[0]} 1 2.0 r1\n")
    assert main(["evidence", str(folder), "--stages", "nosuch"]) == 2
    assert "unknown stage nosuch; these runs recorded: packed, retrieved.final" in capsys.readouterr().err
    # an empty stage beside a non-empty one: scored, and flagged
    (trec / "packed.trec").write_text("")
    assert main(["evidence", str(folder), "--stages", "retrieved.final,packed"]) == 0
    captured = capsys.readouterr()
    assert "packed (empty: ranked nothing)" in captured.out and "stage packed ranked no document" in captured.err
    assert "| r1:bioasq_yn_vanilla_rag | retrieved.final | 1 | " in captured.out
    for k in ("0", "-5"):
        with pytest.raises(SystemExit) as ended:
            main(["evidence", "--search", "bioasq_gold", "--k", k])
        assert ended.value.code == 2
    assert "must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "stage_runs" / "packed.trec").write_text("q1 Q0 d1 1\n"), r"packed.trec:1: a TREC run line has 6"),
    (lambda f: (f / "stage_runs" / "packed.trec").write_text("q1 Q0 d1 1 high r1\n"), r"packed.trec:1: field 'score'"),
    (lambda f: (f / "stage_runs" / "packed.trec").unlink(), r"packed.trec: stage run file missing"),
    (lambda f: _edit(f, lambda r: r["prepass"]["bioasq_yn_vanilla_rag"]["stage_runs"].update(stages="packed")),
     r"stage_runs.stages must be a list"),
    (lambda f: _edit(f, lambda r: r["prepass"]["bioasq_yn_vanilla_rag"].pop("identity")), r"identity.eval_ids must"),
    (lambda f: (f / "run.json").write_text("[1, 2]"), r"run.json: expected a run record \(a JSON object\), found list"),
    (lambda f: (f / "run.json").write_text('{"prepass": {"t": null}}'), r"prepass.t must be an object"),
    (lambda f: (f / "run.json").write_text('{"prepass": {"bioasq'), r"run.json:1: invalid JSON"),
])
def test_evidence_on_a_damaged_run_folder_is_a_one_line_error(tmp_path, capsys, damage, message):
    import re

    folder = _run_folder(tmp_path, ["d1", "d2"])
    damage(folder)
    assert main(["evidence", str(folder)]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err and err.count("\n") == 1, err


def _edit(folder: Path, change) -> None:
    record = json.loads((folder / "run.json").read_text())
    change(record)
    (folder / "run.json").write_text(json.dumps(record))


# -- 6. --throughput: finite positive rates for the sweep's own roles ---------------------------------------------
def test_throughputs_are_finite_rates_of_the_sweeps_roles():
    from medr2_hooks.config import ConfigError
    from medr2_hooks.experiments.cost import check_throughput_keys, parse_throughputs
    from medr2_hooks.experiments.cost_eval import Line

    for bad in ("cot=nan", "cot=inf", "cot=1e-300", "cot=-5", "cot=0", "cot=2000:nan", "cot=", "cot", "=100"):
        with pytest.raises(ConfigError, match="finite numbers of tokens/s"):
            parse_throughputs([bad])
    with pytest.raises(ConfigError, match="finite numbers"):
        parse_throughputs({"cot": float("inf")})
    assert parse_throughputs(["cot=2000:60"]) == {"cot": (2000.0, 60.0)}
    lines = [Line("prepass", "cot", "cot", "Qwen/Qwen2.5-7B", 1, 1, 100, 100, 10)]
    check_throughput_keys({"cot": (1.0, None), "Qwen/Qwen2.5-7B": (1.0, None)}, lines)
    with pytest.raises(ConfigError, match="COT, target: names no role or model of this sweep"):
        check_throughput_keys({"COT": (1.0, None), "target": (1.0, None)}, lines)


# -- also confirmed: two evaluations into one folder, --limit against metadata's limit ------------------------------
def test_a_run_folder_is_written_by_one_evaluation_and_holds_only_its_files(tmp_path):
    from medr2_hooks.errors import Medr2Error
    from medr2_hooks.fs import replaced_folder

    folder = tmp_path / "runs" / "demo"
    folder.mkdir(parents=True)
    (folder / "samples_old_2026.jsonl").write_text("an earlier run's samples\n")
    with replaced_folder(folder) as staging:
        (staging / "run.json").write_text("{}")
        with pytest.raises(Medr2Error, match="another process is writing this folder now"):
            with replaced_folder(folder):
                pass
        assert (folder / "samples_old_2026.jsonl").is_file()  # untouched until the run has written everything
    assert sorted(p.name for p in folder.iterdir()) == ["run.json"]
    with pytest.raises(RuntimeError):
        with replaced_folder(folder) as staging:
            (staging / "half").write_text("")
            raise RuntimeError("the evaluation failed")
    assert sorted(p.name for p in folder.iterdir()) == ["run.json"]
    assert [p.name for p in folder.parent.iterdir() if "partial" in p.name or "replaced" in p.name] == []


def test_a_limit_that_differs_from_metadatas_is_refused_before_any_work():
    from medr2_hooks.errors import Medr2Error
    from medr2_hooks.lmeval.runner import EvalConfig, run_eval

    with pytest.raises(Medr2Error, match="--limit 5 and --metadata limit 2 differ"):
        run_eval(EvalConfig(tasks=["medqa_usmle_medr2"], limit=5, metadata={"limit": 2}, wandb=False))


# -- 1, 2 end to end: a password planted in every URL a run accepts, and every byte the run wrote --------------------
@pytest.mark.slow
def test_a_password_planted_in_every_url_reaches_no_byte_written(tmp_path, monkeypatch, capfd):
    """Roles and the served target at ``http://user:<password>@…`` (a judge's URL with credentials is refused), a
    RareArena run judged, ``medr2 judge RUN --base_url http://user:<password>@…``: the password is in no file of
    the results folder (run.json, lm-eval's results and samples, pre-pass records, stage runs, W&B), of the cache
    (stage cache, packs) and in nothing printed."""
    from medr2_hooks import settings
    from medr2_hooks.config import ConfigError
    from medr2_hooks.llm.hf import HFBackend
    from medr2_hooks.llm.serve import start_background
    from medr2_hooks.lmeval.runner import EvalConfig, run_eval
    from medr2_hooks.retrieve.build import ensure_index
    from pipeline_helpers import TINY

    smol = "embedded:smollm2-135m-instruct"
    ensure_index("textbooks_demo", log=lambda *_: None)
    real, cache, results = settings.cache_dir(), tmp_path / "cache", tmp_path / "results"
    cache.mkdir()
    for shared in ("indexes", "models"):
        (cache / shared).symlink_to(real / shared)
    monkeypatch.setenv("MEDR2_CACHE_DIR", str(cache))
    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(results))
    httpd, url = start_background(HFBackend(smol, batch_size=4), "smol")
    planted = url.replace("http://", f"http://user:{PASSWORD}@")
    target = dict(model="local-completions", limit=1, log_samples=True, wandb=True, gen_kwargs="max_gen_toks=24",
                  model_args=f"model=smol,base_url={planted}/completions,tokenizer={smol},max_length=4096")
    refused = ""
    try:
        role = {"backend": "openai", "model": "smol", "base_url": planted, "tokenizer": smol}
        run_eval(EvalConfig(tasks=["medqa_usmle_ablation_q"], run_name="roles", **target,
                            metadata={"method_override": {**TINY, "llm": role}, "allow_embedded_roles": True}))
        cases = {"cases_file": {"rarearena_rds": str(FIXTURE / "RDS.json")}}
        judge = {"backend": "openai", "api": "chat", "model": "smol"}
        run_eval(EvalConfig(tasks=["rarearena_rds_direct"], run_name="judged", **target,
                            metadata={**cases, "judge": {**judge, "base_url": url}}))
        with pytest.raises(ConfigError) as err:
            run_eval(EvalConfig(tasks=["rarearena_rds_direct"], run_name="refused", **target,
                                metadata={**cases, "judge": {**judge, "base_url": planted}}))
        refused = str(err.value)
        done = subprocess.run([sys.executable, "-m", "medr2_hooks.cli.main", "judge", str(results / "runs" / "judged"),
                               "--model", "smol", "--base_url", planted], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "WANDB_MODE": "offline"})
        assert done.returncode == 0, done.stderr[-2000:]
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert "judge.base_url carries credentials" in refused
    judged = json.loads((results / "runs" / "judged" / "judged.json").read_text())
    assert judged["judge"] == f"smol@{url}"
    record = json.loads((results / "runs" / "roles" / "run.json").read_text())
    usage = record["prepass"]["medqa_usmle_ablation_q"]["usage"]
    assert f"smol@{url}" in usage and usage[f"smol@{url}"]["calls"] > 0  # the served role answered
    written = [Path(root) / name for folder in (results, cache) for root, _, names in os.walk(folder)
               for name in names]
    assert any(p.name.startswith("samples_rarearena") for p in written) and any(p.suffix == ".wandb" for p in written)
    assert any(p.name == "stages.sqlite" for p in written) and any(p.parent.name == "packs" for p in written)
    printed = capfd.readouterr()
    leaks = [str(p) for p in written if PASSWORD.encode() in p.read_bytes()]
    leaks += [name for name, text in (("stdout", printed.out), ("stderr", printed.err), ("refusal", refused),
                                      ("medr2 judge", done.stdout + done.stderr)) if PASSWORD in text]
    assert leaks == []
