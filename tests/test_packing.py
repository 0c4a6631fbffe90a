"""Issue 40.3: what reaches the target's prompt is counted as it is sent, and demonstrations are budgeted one by one."""

from __future__ import annotations


def test_a_demonstration_that_does_not_fit_is_skipped_not_the_end_of_the_list():
    from medr2_hooks.apply.pack import pack

    packed = pack(question_tokens=500, evidence_tokens=[800], demo_tokens=[300, 2000, 300, 300], window=2048,
                  evidence_share=0.5, reserve=16)
    assert packed.evidence == [0] and packed.demos == [0, 2] and packed.skipped_demos == 2
    assert packed.tokens == 500 + 800 + 300 + 300 <= 2048 - 16


def test_shots_per_prompt_are_summarised():
    from medr2_hooks.pipeline.packing import Packing, shots_summary

    packings = [Packing("", [], n, 100, False, 10 - n) for n in (0, 1, 3)]
    assert shots_summary(packings, 10) == {"available": 10, "mean": 1.33, "min": 0, "max": 3, "zero_shot": 1,
                                           "skipped": 26}
    assert shots_summary(packings[:1], 0)["zero_shot"] == 1  # zero-shot by design (LLM-AMT's reader)


def test_no_demonstration_repeats_an_evaluated_question():
    """MMLU-Med's clinical_knowledge-0035 is college_medicine-0187: it was a demonstration while its twin was
    evaluated (on 5779058); no benchmark's demonstrations share content with its evaluated items."""
    from medr2_hooks import data

    for name in ("mmlu_med", "medqa_usmle", "medqa_mcmle", "medmcqa", "pubmedqa", "medxpertqa", "bioasq_yn"):
        pools = data.pools(name)
        evaluated = {data._content(r) for r in pools.eval}
        assert not [d.id for d in pools.demos if data._content(d) in evaluated], name
    assert "clinical_knowledge-0035" not in {d.id for d in data.pools("mmlu_med").demos}


def test_the_paper_targets_are_base_models_sent_no_chat_template():
    from medr2_hooks.experiments.config import load_experiment
    from medr2_hooks.experiments.expand import expand

    exp = load_experiment("table2")
    assert all(m.chat is False and "Instruct" not in m.model_args and "-chat" not in m.model_args for m in exp.models)
    assert not any(r.apply_chat_template for r in expand(exp))
