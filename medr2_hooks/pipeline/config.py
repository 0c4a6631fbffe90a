"""The typed configuration of a retrieval-augmented method (YAML ``method:`` blocks or task metadata).

Switches map onto the paper's Table 10 ablation: ``reformulate`` (query reformulator), ``rerank`` (evidence
reranker: coarse + fine), ``cot`` (CoT generator and the Alg. 2 loop). All three on = Med-R²;
``cot_in_first_query`` = Med-R²-CoT; all off with the dense retriever only = vanilla RAG.
``pipeline`` picks the stage composition, a module of :mod:`medr2_hooks.pipeline` (``medr2``: Alg. 2 and its
ablations; ``llm_amt``: query augmenter → hybrid retrieval → relevance and usefulness filters → reader CoT, no
demonstrations; ``hyde``: a hypothetical passage's embedding → dense retrieval → vanilla RAG's packing).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..config import from_dict, in_range
from ..fs import safe_component
from ..rerank.fine import ConflictConfig
from .declare import all_roles, known

MIN_PROMPT_ROOM = 512  # tokens of the window a question with its evidence needs, beside the answer's room
MIN_EVIDENCE_TOKENS = 64  # the smallest evidence budget: one short passage

EMBEDDED_LLM = {"backend": "hf", "model": "embedded:gemma-270m", "batch_size": 8}


@dataclass(frozen=True)
class MethodConfig:
    method: str = "medr2"  # the name runs and pre-pass records are filed under
    pipeline: str = "medr2"  # a pipeline module of medr2_hooks.pipeline the method registry names
    index: str = "textbooks_demo"
    retrievers: list[str] | None = None  # default: every retriever the index has
    unit: str = "passage"  # evidence unit: passage (fits a 4K window) or document (paper-faithful)
    fusion: str = "union"
    retrieve_k: int = 10  # per retriever
    # None: classify whenever a stage needs the labels (the reformulator its EBM category, the reranker's f_g its
    # question type); false together with reformulate or rerank is a contradiction and an error
    classify: bool | None = None
    reformulate: bool = True
    rerank: bool = True
    cot: bool = True
    cot_in_first_query: bool = False  # Med-R²-CoT
    # Does the target see its own question's CoT before answering? None: the method's paper rule -- Med-R²: no
    # (§3.4: CoTs serve as demonstrations; the target reasons for itself); LLM-AMT: yes (its LLM reader answers
    # with the knowledge and its own reasoning).
    answer_with_cot: bool | None = None
    coarse: str = "llm"  # llm | cross_encoder
    cross_encoder: str = "BAAI/bge-reranker-v2-m3"
    coarse_k: int = 5
    # What the coarse reranker (and LLM-AMT's relevance filter) judges relevance against. The paper reranks D
    # "based on semantic relevance to the current query": the iteration's retrieval query (question +
    # reformulation + option-free CoT). "question": the question stem alone.
    rerank_query: str = "query"
    # The retrieval query: "paper" (§3.1: the reformulated query q_EBM, plus the previous CoT from t = 2) or
    # "question_first" (the question, its reformulation, then the CoT).
    query: str = "question_first"
    conflict: ConflictConfig = field(default_factory=ConflictConfig)
    alpha: float = 1.0
    # Alg. 2 stops at t when Acc_t / mu_t > delta, where mu_t is the L2 shift between consecutive coarse sets'
    # centroids of unit-normalised dense embeddings (a number in [0, 2]): with Acc = 1 the loop stops once
    # mu_t < 1 / delta = 0.146 (see README "Method choices": stopping iterations for other deltas).
    delta: float = 6.85
    delta_unit: str = "l2_centroid_shift_unit_embeddings"
    iterations: int = 5
    window: int = 4096
    evidence_share: float = 0.5
    answer_tokens: int = 0  # the window's room kept for the target's answer (generative scoring: its max_gen_toks)
    demo_evidence: int = 1  # evidence documents shown with each demonstration
    max_demos: int | None = None  # cap on the demonstration pool (None: Table 7's n-shot, the whole pool)
    target_tokenizer: str = "embedded:gemma-270m"
    decision_mode: str = "closed_set"  # closed_set | generate
    label_scoring: str = "letters"  # closed-set menus: letters (one token a label) | token_mean (names, per token)
    max_doc_tokens: int = 384  # document text given to LLM judges
    cot_max_new_tokens: int = 96
    reformulate_max_new_tokens: int = 48
    augment_max_new_tokens: int = 64  # LLM-AMT: rewrite and expansion, each
    relevance_threshold: float = 0.5  # LLM-AMT refiner: keep a document when P(yes) exceeds this
    usefulness_threshold: float = 0.5
    options: dict = field(default_factory=dict)  # pipeline -> its own settings (its register(options=...))
    roles: dict = field(default_factory=dict)  # role -> backend spec; missing roles use ``llm``
    llm: dict = field(default_factory=lambda: dict(EMBEDDED_LLM))

    def __post_init__(self):
        unknown = sorted(set(self.roles) - set(all_roles()))
        if unknown:  # the roles the pipelines' stages declare (medr2_hooks.pipeline.declare.all_roles)
            raise ValueError(f"unknown role {unknown[0]!r}; valid roles: {', '.join(all_roles())}")
        from ..llm import check_spec

        check_spec(self.llm, "llm")
        for role, spec in self.roles.items():
            check_spec(spec, f"roles.{role}")
        if self.unit not in ("passage", "document"):
            raise ValueError(f"unit must be passage or document, found {self.unit!r}")
        if self.label_scoring not in ("letters", "token_mean"):
            raise ValueError(f"label_scoring must be letters or token_mean, found {self.label_scoring!r}")
        if self.query not in ("paper", "question_first"):
            raise ValueError(f"query must be paper or question_first, found {self.query!r}")
        if self.rerank_query not in ("query", "question"):
            raise ValueError(f"rerank_query must be query or question, found {self.rerank_query!r}")
        if self.coarse not in ("llm", "cross_encoder"):
            raise ValueError(f"coarse must be llm or cross_encoder, found {self.coarse!r}")
        if self.delta_unit != "l2_centroid_shift_unit_embeddings":
            raise ValueError("delta_unit: delta is compared with the L2 centroid shift of unit-normalised embeddings "
                             f"(l2_centroid_shift_unit_embeddings), found {self.delta_unit!r}")
        if self.pipeline not in known():
            raise ValueError(f"pipeline must be one of {', '.join(known())}, found {self.pipeline!r}")
        self._check_options()
        needed = self.reformulate or self.rerank
        if self.classify is None:
            object.__setattr__(self, "classify", needed)
        elif not self.classify and needed:
            raise ValueError("classify: false contradicts reformulate/rerank: the reformulator needs the EBM category "
                             "and the reranker's f_g the question type (leave classify unset)")
        if self.answer_with_cot is None:
            object.__setattr__(self, "answer_with_cot", self.pipeline == "llm_amt")
        safe_component(self.method, "method name")
        safe_component(self.index, "index name")
        for name in ("iterations", "retrieve_k", "coarse_k", "window", "max_doc_tokens", "cot_max_new_tokens",
                     "reformulate_max_new_tokens", "augment_max_new_tokens"):
            in_range(self, name, 1)
        for name in ("demo_evidence", "max_demos", "alpha", "delta", "answer_tokens"):
            in_range(self, name, 0)
        in_range(self, "evidence_share", 0, 1, low_open=True)
        self._check_room()
        for name in ("relevance_threshold", "usefulness_threshold"):
            in_range(self, name, 0, 1)

    def _check_options(self) -> None:
        """``options`` (pipeline name -> its own settings) checked against each pipeline's declared settings: an
        unknown pipeline, a pipeline without settings, an unknown key or a wrong type is an error. The config's own
        pipeline gets its defaults filled in, so a run record shows every setting it ran with; another pipeline's
        entry (a sweep-wide override) is checked and kept, as ``roles`` keeps roles other pipelines call."""
        from .declare import pipeline

        checked = {}
        for name, raw in self.options.items():
            if name not in known():
                raise ValueError(f"options.{name}: not a pipeline; pipelines: {', '.join(known())}")
            declared = pipeline(name).options
            if declared is None:
                raise ValueError(f"options.{name}: pipeline {name!r} has no settings of its own")
            checked[name] = asdict(from_dict(declared, raw, f"options.{name}"))
        own = pipeline(self.pipeline).options
        if own is not None and self.pipeline not in checked:
            checked[self.pipeline] = asdict(own())
        object.__setattr__(self, "options", checked)

    def _check_room(self) -> None:
        """A window that can hold what the method means: room for the prompt beside the answer's (a generative
        target's max_gen_toks of 8,000 in a 4,096-token window left 147-token prompts: no evidence, no
        demonstrations), and an evidence budget of at least one short passage (evidence_share 1e-300: none)."""
        from ..apply.pack import RESERVE

        room = self.window - RESERVE - self.answer_tokens
        if room < MIN_PROMPT_ROOM:
            raise ValueError(f"answer_tokens {self.answer_tokens} (the target's max_gen_toks) leaves {max(room, 0)} of "
                             f"the {self.window}-token window for the prompt, under the {MIN_PROMPT_ROOM} a question "
                             "with evidence needs: lower max_gen_toks or use a larger window")
        if int(self.evidence_share * self.window) < MIN_EVIDENCE_TOKENS:
            raise ValueError(f"evidence_share {self.evidence_share:g} of a {self.window}-token window is an evidence "
                             f"budget of {int(self.evidence_share * self.window)} tokens, under one short passage "
                             f"({MIN_EVIDENCE_TOKENS})")

    def role(self, name: str) -> dict:
        return dict(self.roles.get(name) or self.llm)

    def roles_used(self) -> tuple[str, ...]:
        """The roles this method's stages call (the others' specs are never loaded): read off the pipeline's
        declared stages (:mod:`medr2_hooks.pipeline.declare`)."""
        from .declare import pipeline

        return pipeline(self.pipeline).roles(self)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict, where: str = "method config") -> "MethodConfig":
        return from_dict(cls, raw, where)
