"""Local transformers backend (CPU or GPU).

Scoring keeps only the logits of the continuation positions (sequences are left-padded so continuations
end the batch, and ``logits_to_keep`` slices the rest away): Gemma-3's 262k vocabulary makes full
``[batch, seq, vocab]`` float32 logits several GB.
"""

from __future__ import annotations

import torch

from .backend import Usage, cut_at_stop
from .embedded import resolve


def pad(seqs: list[list[int]], pad_id: int, left: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Token ids, attention mask and position ids of ``seqs`` padded to one width (left: sequences end together)."""
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for j, seq in enumerate(seqs):
        span = slice(width - len(seq), width) if left else slice(0, len(seq))
        ids[j, span] = torch.tensor(seq)
        mask[j, span] = 1
    return ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


class HFBackend:
    def __init__(self, model: str, dtype: str = "float32", device: str | None = None, batch_size: int = 8,
                 max_length: int | None = None):
        from transformers import AutoTokenizer

        from .local import load_causal_lm, weights_revision

        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a whole number >= 1, found {batch_size!r}")

        self.path = resolve(model)
        self.model_id = f"{model}@{weights_revision(self.path)}"
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = load_causal_lm(self.path, getattr(torch, dtype)).to(self.device).eval()
        self.batch_size = batch_size
        self.max_length = max_length or int(getattr(self.model.config, "max_position_embeddings", 8192))
        self.usage = Usage()

    # -- text utilities ------------------------------------------------------------------------------
    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def truncate(self, text: str, max_tokens: int) -> str:
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        if len(enc["input_ids"]) <= max_tokens:
            return text
        return text[: enc["offset_mapping"][max_tokens - 1][1]] if max_tokens > 0 else ""

    def chat(self, user: str, system: str | None = None) -> str:
        if not self.tokenizer.chat_template:
            return f"{system}\n\n{user}" if system else user
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        # the tokenizer adds BOS itself when it has one to add (Gemma); SmolLM2's "BOS" is <|im_start|>, which it
        # never prepends, so its template text must stay whole
        bos = self.tokenizer.bos_token or ""
        adds_bos = bool(bos) and self.tokenizer("a")["input_ids"][:1] == [self.tokenizer.bos_token_id]
        return text[len(bos):] if adds_bos and text.startswith(bos) else text

    # -- model calls ---------------------------------------------------------------------------------
    def _batches(self, n: int, lengths: list[int]):
        order = sorted(range(n), key=lambda i: -lengths[i])  # similar lengths together: less padding
        for start in range(0, n, self.batch_size):
            yield order[start:start + self.batch_size]

    @torch.no_grad()
    def score(self, prompts: list[str], continuations: list[str], role: str = "score") -> list[tuple[float, int]]:
        ctx = self.tokenizer(prompts, add_special_tokens=True)["input_ids"]
        cont = self.tokenizer(continuations, add_special_tokens=False)["input_ids"]
        rows = []
        for c, x in zip(ctx, cont):
            if not x:
                raise ValueError("empty continuation: nothing to score")
            keep = max(self.max_length - len(x), 1)
            rows.append((c[-keep:], x))  # over-long prompts lose their start, never the continuation
        out: list[tuple[float, int]] = [(0.0, 0)] * len(rows)
        total = 0
        for idx in self._batches(len(rows), [len(c) + len(x) for c, x in rows]):
            n_cont = max(len(rows[i][1]) for i in idx)
            ids, mask, positions = pad([rows[i][0] + rows[i][1] for i in idx], self.tokenizer.pad_token_id, left=True)
            logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                position_ids=positions.to(self.device), logits_to_keep=n_cont + 1).logits
            logprobs = logits[:, :-1].float().log_softmax(-1)  # position t predicts token t + 1
            for j, i in enumerate(idx):
                x = rows[i][1]
                targets = torch.tensor(x, device=logprobs.device)
                lp = logprobs[j, n_cont - len(x):].gather(1, targets[:, None]).sum().item()
                out[i] = (lp, len(x))
            total += int(mask.sum())
        self.usage.add(role, len(prompts), total)
        return out

    @torch.no_grad()
    def generate(self, prompts: list[str], max_new_tokens: int, stop: list[str] | None = None,
                 role: str = "generate") -> list[str]:
        out = [""] * len(prompts)
        lengths = self.count_tokens(prompts)
        prompt_tokens = generated = 0
        for idx in self._batches(len(prompts), lengths):
            enc = self.tokenizer([prompts[i] for i in idx], return_tensors="pt", padding=True, truncation=True,
                                 max_length=self.max_length - max_new_tokens).to(self.device)
            gen = self.model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                      pad_token_id=self.tokenizer.pad_token_id)
            new = gen[:, enc["input_ids"].shape[1]:]
            prompt_tokens += int(enc["attention_mask"].sum())
            generated += int((new != self.tokenizer.pad_token_id).sum())
            for j, i in enumerate(idx):
                out[i] = cut_at_stop(self.tokenizer.decode(new[j], skip_special_tokens=True), stop)
        self.usage.add(role, len(prompts), prompt_tokens, generated)
        return out

    def score_choices(self, prompts: list[str], choices: list[str], role: str = "score") -> list[list[float]]:
        return score_choices(self, prompts, choices, role)


@torch.no_grad()
def score_choices(backend: HFBackend, prompts: list[str], choices: list[str], role: str = "score") -> list[list[float]]:
    """Summed log-probabilities ``[len(prompts)][len(choices)]`` of every choice after every prompt.

    Each prompt runs through the model once; its key/value cache is repeated for the choices, which are
    scored together in a second, short pass — a label set of 16 costs about one prompt pass instead of 16.
    """
    tok, model, device = backend.tokenizer, backend.model, backend.device
    cont = tok(choices, add_special_tokens=False)["input_ids"]
    if any(not c for c in cont):
        raise ValueError("empty choice: nothing to score")
    n_choices, width_c = len(cont), max(map(len, cont))
    cont_ids, cont_mask, _ = pad(cont, tok.pad_token_id, left=False)
    ctx = tok(prompts, add_special_tokens=True)["input_ids"]
    ctx = [c[-(backend.max_length - width_c):] for c in ctx]
    out: list[list[float]] = [[] for _ in prompts]
    total = 0
    for idx in backend._batches(len(ctx), [len(c) for c in ctx]):
        ids, mask, positions = pad([ctx[i] for i in idx], tok.pad_token_id, left=True)
        first = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                      use_cache=True, logits_to_keep=1)
        first_lp = first.logits[:, -1].float().log_softmax(-1)  # predicts each choice's first token
        scores = first_lp[:, cont_ids[:, 0].to(device)]  # [batch, n_choices]
        if width_c > 1:
            cache = first.past_key_values
            cache.batch_repeat_interleave(n_choices)
            b = len(idx)
            rest = cont_ids[:, :-1].repeat(b, 1)  # tokens fed to predict choice tokens 1..width_c-1
            full_mask = torch.cat([mask.repeat_interleave(n_choices, 0), cont_mask[:, :-1].repeat(b, 1)], dim=1)
            start = positions[:, -1:].repeat_interleave(n_choices, 0) + 1
            pos = start + torch.arange(width_c - 1)
            second = model(input_ids=rest.to(device), attention_mask=full_mask.to(device), position_ids=pos.to(device),
                           past_key_values=cache, use_cache=False)
            lp = second.logits.float().log_softmax(-1)  # [b * n_choices, width_c - 1, vocab]
            targets = cont_ids[:, 1:].repeat(b, 1).to(device)
            picked = lp.gather(2, targets[..., None])[..., 0] * cont_mask[:, 1:].repeat(b, 1).to(device)
            scores = scores + picked.sum(-1).view(b, n_choices)
        for j, i in enumerate(idx):
            out[i] = scores[j].tolist()
        total += int(mask.sum()) + len(idx) * int(cont_mask.sum())
    backend.usage.add(role, len(prompts), total)
    return out
