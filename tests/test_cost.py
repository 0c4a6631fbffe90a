"""The cost estimate of ``medr2 sweep --dry-run --json``: the pipeline run against counting stand-ins gives the counts
computed by hand on a small config."""

from __future__ import annotations

import json
import math

import pytest

from medr2_hooks.config import ConfigError
from medr2_hooks.experiments.config import load_experiment
from medr2_hooks.experiments.cost import estimate, parse_throughputs, run_lines
from medr2_hooks.experiments.expand import expand

SERVED_LEVELER = "{backend: openai, model: 'embedded:gemma-270m', base_url: 'http://127.0.0.1:9/v1'}"


def small(tmp_path, methods="[medr2]", extra="") -> str:
    """Two MedQA-USMLE questions and one demonstration; dense retrieval of 4 passages (a Flat index returns exactly
    k), S^c of 3, two iterations, conflict pairs among 3; every role on the embedded model in process (``hf``:
    one request a menu) except the leveler, served (one request a menu too: the letters read from the next-token
    distribution, issue 41)."""
    from medr2_hooks.retrieve.build import ensure_index

    ensure_index("textbooks_demo")
    path = tmp_path / "cost_small.yaml"
    path.write_text(
        "name: cost_small\nmodels: [{name: gemma-270m, model: 'embedded:gemma-270m'}]\n"
        f"methods: {methods}\nbenchmarks: [medqa_usmle]\nlimit: 2\n"
        "method_override: {retrievers: [dense], retrieve_k: 4, coarse_k: 3, iterations: 2, max_demos: 1, "
        "conflict: {top: 3}, cot_max_new_tokens: 16, reformulate_max_new_tokens: 8, "
        f"roles: {{leveler: {SERVED_LEVELER}}}}}\n{extra}")
    return str(path)


def by_stage(lines) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for line in lines:
        s = out.setdefault(f"{line.phase}:{line.stage}", {"items": 0, "requests": 0, "generated": 0})
        s["items"] += line.items
        s["requests"] += line.requests
        s["generated"] += line.generated_tokens
    return out


def test_counts_of_a_small_medr2_run_equal_the_hand_computed_ones(tmp_path):
    (run,) = expand(load_experiment(small(tmp_path)))
    lines, assumptions = run_lines(run)
    got = by_stage(lines)
    n, k, t = 3, 3, 2  # 2 questions + 1 demonstration; S^c; iterations (ceiling: no early stop)
    pairs = math.comb(3, 2)
    assert assumptions["items"] == 2 and assumptions["demonstrations"] == 1
    expected = {
        "prepass:classify": (n, n * 2, 0),  # two menus a question, one request each in process
        "prepass:reformulate": (n, n, n * 8),
        "prepass:reference": (n, n, 0),
        "prepass:coarse": (t * n * 4, t * n * 4, 0),  # every (query, passage) pair of the 4 dense hits
        # served: one request a menu (9 letters, one token each), one token generated to read its distribution
        "prepass:evidence_level": (t * n * k, t * n * k, t * n * k),
        "prepass:doc_type": (t * n * k, t * n * k, 0),
        "prepass:usefulness": (t * n, t * n * (k + 1), 0),  # no document, then each of S^c
        "prepass:conflict": (t * n, t * n * pairs, 0),
        "prepass:cot": (t * n, 2 * t * n, t * n * 16),  # the CoT, then its answer read from the options' menu
        "prepass:demo_cot": (1, 2, 16),
        "eval:answer": (2, 2 * 5, 0),  # letters: one log-likelihood per option (these MedQA-USMLE items: A-E)
    }
    assert {stage: (s["items"], s["requests"], s["generated"]) for stage, s in got.items()} == expected
    sent = {x.stage: [0.0, 0.0] for x in lines}
    for x in lines:
        sent[x.stage][0] += x.prompt_tokens
        sent[x.stage][1] += x.prompt_tokens_unique
    # a served menu sends its prompt once, computed once (every judged document is new)
    assert sent["evidence_level"][0] == pytest.approx(sent["evidence_level"][1])
    # the proxy's no-document prompt of a question comes back in iteration 2: a prefix cache computes it once
    first = [x for x in lines if x.stage == "usefulness"][0]
    assert first.prompt_tokens == pytest.approx(first.prompt_tokens_unique)
    assert sent["usefulness"][1] < sent["usefulness"][0]


def test_a_served_menu_of_long_names_is_a_request_per_label_computed_whole(tmp_path):
    """Issue 41: token_mean scores each label name as its own prompt-logprob sequence, which vLLM computes without its
    prefix cache: requests and computed tokens are the label count times the prompt, nothing counted once."""
    (run,) = expand(load_experiment(small(tmp_path, extra="method_overrides: {medr2: {label_scoring: token_mean}}\n")))
    line = {x.stage: x for x in run_lines(run)[0]}["evidence_level"]
    assert line.requests == 9 * line.items and line.prompt_tokens == pytest.approx(line.prompt_tokens_unique)


def test_prompt_tokens_are_the_stages_own_prompts_on_the_runs_items(tmp_path):
    """The classifier's tokens: both menus rendered on each question (and the demonstration), scored in one pass with
    each label's letter (one token each), as the hf backend counts them."""
    from medr2_hooks.classify import EBM_CATEGORIES, QUESTION_TYPES, ebm_prompt, qtype_prompt
    from medr2_hooks.experiments.cost_sizes import tokens_for
    from medr2_hooks.prepass.spec import build_spec

    (run,) = expand(load_experiment(small(tmp_path)))
    lines, _ = run_lines(run)
    spec = build_spec("medqa_usmle", method="medr2", limit=2, **{k: v for k, v in run.metadata.items()})
    questions = [r.question for r in spec.eval_records + spec.demos]
    tok = tokens_for("embedded:gemma-270m")
    by_hand = sum(tok.count([ebm_prompt(q)])[0] + len(EBM_CATEGORIES) + tok.count([qtype_prompt(q)])[0] +
                  len(QUESTION_TYPES) for q in questions)
    (classify,) = [line for line in lines if line.stage == "classify"]
    assert classify.prompt_tokens == pytest.approx(by_hand)
    assert tok.stand_in is False and "counted with" not in tok.describe()


def test_the_total_counts_shared_work_once_and_gives_gpu_hours(tmp_path):
    """medr2 and ablation_qr share their question-only stages and their first iteration's judgements (the stage
    cache); the sweep's total counts them once. GPU-hours: (distinct prompt + generated tokens) / throughput."""
    runs = expand(load_experiment(small(tmp_path, methods="[medr2, ablation_qr]")))
    costs, total = estimate(runs, parse_throughputs(["embedded:gemma-270m=1000", "target=2000:50"]))
    shared = {"classify", "reformulate", "reference", "coarse", "evidence_level", "doc_type", "usefulness", "conflict"}
    first = [line for line in costs[1]["lines"] if line["stage"] in shared]
    assert total["lines_shared_with_an_earlier_run"] == len(first) == 8
    assert total["prepass"]["requests"] == costs[0]["prepass"]["requests"]  # ablation_qr adds nothing new
    target = [e for e in total["by_role"] if e["role"] == "target"][0]
    assert target["gpu_hours"] == pytest.approx(round(target["prompt_tokens_unique"] / 2000 / 3600, 3), abs=1e-3)
    judge = [e for e in total["by_role"] if e["role"] == "leveler"][0]
    assert judge["gpu_hours"] == pytest.approx(round(judge["prompt_tokens_unique"] / 1000 / 3600, 3), abs=1e-3)
    assert total["gpu_hours"] == pytest.approx(sum(e["gpu_hours"] for e in total["by_role"]), abs=0.01)


def test_the_dry_run_json_carries_each_runs_cost_and_the_total(tmp_path, capsys):
    from medr2_hooks.cli.main import main

    assert main(["sweep", small(tmp_path, extra="throughput: {target: 500}\n"), "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["experiment"] == "cost_small" and len(out["runs"]) == 1
    cost = out["runs"][0]["cost"]
    assert cost["prepass"]["requests"] > 0 and cost["eval"]["requests"] == 10
    assert out["total"]["gpu_hours"] is None and "cot" in out["total"]["missing_throughput"]  # a role without one
    assert [e["gpu_hours"] for e in out["total"]["by_role"] if e["role"] == "target"][0] is not None
    # per role and endpoint: the served leveler's server, the in-process roles none
    endpoints = {e["role"]: e["endpoint"] for e in out["total"]["by_role"]}
    assert endpoints["leveler"] == "http://127.0.0.1:9/v1" and endpoints["classifier"] is None


def test_an_endpoints_credentials_never_reach_the_estimate(tmp_path, capsys):
    from medr2_hooks.cli.main import main

    config = small(tmp_path).replace("'http://127.0.0.1:9/v1'", "'http://user:s3cr3t@127.0.0.1:9/v1?api_key=k3y'")
    assert main(["sweep", config, "--dry-run", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["runs"] and "s3cr3t" not in out and "k3y" not in out


@pytest.mark.parametrize("bad", ["cot", "cot=fast", "cot=0", "cot=1:2:3", "cot=-5"])
def test_a_throughput_that_cannot_mean_anything_is_refused(bad):
    with pytest.raises(ConfigError, match="ROLE_OR_MODEL=TOKENS_PER_S"):
        parse_throughputs([bad])


def test_a_prompt_counted_from_its_words_is_the_tokenizers_own_count():
    """The dry-run counts a prompt as the sum of its words' (and known lines') counts: equal to the tokenizer's
    count of the whole text on the index's passages, a numbered evidence block of 80K tokens, and that block in a
    chat turn, under each tokenizer shipped here; counting again (from what is remembered) gives the same."""
    from medr2_hooks.experiments.cost_sizes import passage_sample, tokens_for
    from medr2_hooks.retrieve.build import ensure_index

    ensure_index("textbooks_demo")
    passages = list(passage_sample("textbooks_demo")[0])[:400]
    block = "Evidence:\n" + "".join(f"[{i}] {p}\n" for i, p in enumerate(passages, 1)) + "\n"
    for name in ("embedded:gemma-270m", "embedded:smollm2-135m-instruct", "embedded:minilm"):
        tokens = tokens_for(name)
        texts = passages + [block, tokens.chat(block + "Question: Which drug is first line?\nAnswer:")]
        whole = [len(ids) for ids in tokens.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        assert whole[-2] > 50_000, name
        assert tokens.count(texts) == whole, name
        assert tokens.count(texts[::-1]) == whole[::-1], name
