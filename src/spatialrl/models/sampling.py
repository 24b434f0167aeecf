"""Token sampling: the one decode loop of eval (``HFPolicy.generate``) and RL (``sample_segments``).

Token selection happens in our own logits processor (:class:`TokenSampler`), with HF's greedy search
picking the one token it leaves. Why: the log-prob of each chosen token is then recorded from the very
logits it was drawn from (``logits / temperature``, or the raw logits for greedy) without keeping every
step's full-vocabulary logits, sampling draws from a ``torch.Generator`` (seeded per call by the eval
policy, carried in checkpoints by the trainers; never global RNG state), and the model's own
``generation_config`` (Qwen ships ``repetition_penalty=1.05``) cannot silently change the
distribution the trainer later re-scores. :func:`generate_tokens` runs ``model.generate`` with it on a
left-padded batch and cuts each answer after its first end-of-turn token.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from spatialrl.conversation import SamplingParams


class TokenSampler(LogitsProcessor):
    """Chooses each next token (greedy or temperature/top-p sampling) and records its log-prob.

    Returns scores that are ``-inf`` everywhere except the chosen token, so HF's greedy search takes
    exactly our choice. ``banned`` tokens (image/video placeholders) are never chosen: one in an answer
    would make the next prompt's placeholder count disagree with its images. Log-probs stay those of
    the unrestricted distribution, which a teacher-forced forward pass reproduces.
    """

    def __init__(self, sampling: SamplingParams, generator: torch.Generator | None, banned: list[int],
                 row_seeds: list[list[int]] | None = None):
        self.sampling = sampling
        self.generator = generator
        self.banned = banned
        # Per-row seed material (``SamplingParams.stream_seed``): row i's token at step k is drawn by
        # inverse-CDF from one uniform of ``default_rng([*row_seeds[i], k])``, so a row's draws do not
        # depend on the other rows of the batch (batch size, resume point). None: one shared generator.
        self.row_seeds = row_seeds
        self.chosen: list[torch.Tensor] = []
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        logits = scores.float()
        if self.sampling.greedy:
            logp = torch.log_softmax(logits, dim=-1)
            chosen = logits.index_fill(-1, self._banned(logits), float("-inf")).argmax(dim=-1)
        else:
            logp = torch.log_softmax(logits / self.sampling.temperature, dim=-1)
            probs = logp.exp().index_fill(-1, self._banned(logits), 0.0)
            if self.sampling.top_p < 1.0:
                sorted_p, order = probs.sort(dim=-1, descending=True)
                drop = (sorted_p.cumsum(dim=-1) - sorted_p) >= self.sampling.top_p  # keeps at least one
                sorted_p = sorted_p.masked_fill(drop, 0.0)
                probs = torch.zeros_like(probs).scatter_(-1, order, sorted_p)
            if self.row_seeds is not None:
                k = len(self.chosen)
                u = torch.tensor([np.random.default_rng([*seed, k]).random() for seed in self.row_seeds],
                                 dtype=torch.float64, device=probs.device)
                cdf = probs.double().cumsum(dim=-1)
                chosen = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(-1)
                chosen = chosen.clamp_(max=probs.shape[-1] - 1)
            else:
                chosen = torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)
        self.chosen.append(chosen)
        self.logprobs.append(logp.gather(-1, chosen[:, None]).squeeze(-1))
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(-1, chosen[:, None], 0.0)

    def _banned(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.tensor(self.banned, dtype=torch.long, device=logits.device)


@torch.no_grad()
def generate_tokens(
    model: Any,
    inputs: dict[str, Any],
    sampling: SamplingParams,
    generator: torch.Generator | None,
    eos_ids: list[int],
    banned: list[int],
    pad_id: int,
    row_seeds: list[list[int]] | None = None,
    min_new_tokens: int = 0,
    keep_rows: int | None = None,
    **generation_kwargs: Any,
) -> list[tuple[list[int], list[float]]]:
    """Decode one answer per row of the left-padded ``inputs``: ``[(token_ids, logprobs)]``, each cut
    after its first token in ``eos_ids``. ``keep_rows`` returns only the first rows (filler rows of a
    fixed-shape batch still draw from ``generator``); ``generation_kwargs`` go to the
    ``GenerationConfig`` (``cache_implementation="static"``)."""
    sampler = TokenSampler(sampling, generator, banned, row_seeds)
    width = inputs["input_ids"].shape[1]
    result = model.generate(
        **inputs,
        generation_config=GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            min_new_tokens=min(min_new_tokens, sampling.max_new_tokens) or None,
            do_sample=False, num_beams=1, repetition_penalty=1.0, use_cache=True,
            eos_token_id=list(eos_ids), pad_token_id=pad_id, **generation_kwargs,
        ),
        logits_processor=LogitsProcessorList([sampler]),
    )
    sequences = result if isinstance(result, torch.Tensor) else result.sequences
    n = sequences.shape[0] if keep_rows is None else keep_rows
    new = sequences[:n, width:].tolist()
    logprobs = torch.stack(sampler.logprobs, dim=1)[:n].tolist() if sampler.logprobs else [[] for _ in new]
    eos = set(eos_ids)
    out = []
    for row, lps in zip(new, logprobs, strict=True):
        ids = row
        for k, tok in enumerate(row):
            if tok in eos:
                ids = row[: k + 1]
                break
        out.append((ids, [float(x) for x in lps[: len(ids)]]))
    return out
