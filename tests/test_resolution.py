"""Issue 42.3: one resolution of a method's settings (one merge rule), one parser of lm-eval's key=value strings, one
place that names the target model, and the CPU twin as a named setting."""

from __future__ import annotations

import pytest

from medr2_hooks import methods
from medr2_hooks.config import ConfigError, key_values, merge, target_model


def test_a_methods_settings_merge_key_by_key_wherever_they_are_resolved():
    cfg = methods.resolve("medr2", {"conflict": {"threshold": 0.25}, "roles": {"leveler": {"model": "embedded:x"}}})
    assert cfg.conflict.threshold == 0.25 and cfg.conflict.top == methods.resolve("medr2").conflict.top
    assert cfg.role("leveler")["model"] == "embedded:x" and cfg.role("cot") == cfg.llm
    assert methods.resolve("vanilla_rag").retrievers == ["dense"]
    with pytest.raises(ConfigError, match="no retrieval settings"):
        methods.resolve("direct")
    with pytest.raises(ConfigError, match="unknown key 'iteration'"):
        methods.resolve("medr2", {"iteration": 2})
    assert merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}, "d": 4}) == {"a": {"b": 1, "c": 3}, "d": 4}


def test_lm_evals_key_value_strings_have_one_parser():
    got = key_values('pretrained=Qwen/Qwen2.5-7B,hf_overrides={"rope_scaling": {"type": "yarn", "factor": 4}},'
                     'max_length=32768')
    assert got == {"pretrained": "Qwen/Qwen2.5-7B", "hf_overrides": '{"rope_scaling": {"type": "yarn", "factor": 4}}',
                   "max_length": "32768"}
    assert key_values("") == {} and key_values(None) == {}
    with pytest.raises(ConfigError, match="--gen_kwargs: expected key=value, found 'max_gen_toks'"):
        key_values("max_gen_toks", "--gen_kwargs")
    from medr2_hooks.lmeval.runner import parse_model_args

    assert parse_model_args("pretrained=x,dtype=float16,max_length=4096,trust_remote_code=true") == {
        "pretrained": "x", "dtype": "float16", "max_length": 4096, "trust_remote_code": True}
    with pytest.raises(ConfigError, match="invalid JSON"):
        parse_model_args("hf_overrides={bad")


def test_the_target_is_named_in_one_place():
    from medr2_hooks.prepass.spec import target_from_argv

    assert target_model("hf", "pretrained=meta-llama/Llama-3.1-8B,dtype=bfloat16") == "meta-llama/Llama-3.1-8B"
    assert target_model("local-completions", "model=Qwen/Qwen2.5-72B,base_url=http://h:8000/v1") == "Qwen/Qwen2.5-72B"
    assert target_model("embedded:gemma-270m", "") == "embedded:gemma-270m"
    argv = ["lm_eval", "--model", "local-completions", "--model_args", "model=m7,base_url=http://h/v1"]
    assert target_from_argv(argv) == "m7"  # a served target is the model its server runs (was: the client's name)


def test_the_cpu_twin_is_one_named_setting():
    from medr2_hooks.experiments.config import load_experiment, setting_metadata

    twin = setting_metadata("cpu_twin", {})["method_override"]
    assert twin["iterations"] == 2 and twin["conflict"] == {"top": 2}
    own = {"table2_embedded": {"query": "paper", "augment_max_new_tokens": 24},
           "table10_embedded": {"query": "paper"},
           "table9_embedded": {"query": "paper", "unit": "document", "retrieve_k": 16, "coarse_k": 32},
           "evidence_embedded": {"query": "paper", "retrieve_k": 10, "coarse_k": 6}}
    for name, added in own.items():  # each twin: the setting, then its own keys
        exp = load_experiment(name)
        assert exp.setting == "cpu_twin" and exp.method_override == merge(twin, added), name
    # the run's own --metadata goes over the setting, key by key
    got = setting_metadata("cpu_twin", {"method_override": {"conflict": {"threshold": 0.5}}, "limit": 3})
    assert got["method_override"]["conflict"] == {"top": 2, "threshold": 0.5} and got["limit"] == 3
    with pytest.raises(ConfigError, match="--setting paper: the setting also sets .*scoring"):
        setting_metadata("paper", {})
    with pytest.raises(ConfigError, match="setting 'nosuch' is not in"):
        setting_metadata("nosuch", {})
