"""Synthetic image-only tasks: can a model *learn* to see, tell its images apart and compare them?

Why this exists (issue 19): the shipped TVR models were blind — swapping their images moved the action
distribution by < 0.01 total variation. A TVR agent must compare two frames (is the current view the
target? which way does it lie?), and a from-scratch VLM only does that if its architecture and recipe let
the comparison be learned at all. These tasks separate the abilities a TVR policy stacks on, each with an
answer that only the pixels decide, so a failure points at one link:

* ``color`` — one image of a noisy solid colour; name the colour. The vision path reaches the answer.
* ``second`` — two colour images; name the colour of the second. The model tells its images apart by
  position (pixels paired with the right placeholders, in order).
* ``same_color`` — two colour images; the same colour? A comparison of global features.
* ``same_pattern`` — two random 4×4 grids of colours; identical? A fine-grained, cell-by-cell
  comparison: what TVR's Stop and its last steps hinge on (a one-action-away view differs locally).
* ``same_pattern_joined`` — the same two grids side by side in *one* image (each ``width`` px wide, so the
  image is ``2 * width``); are the halves identical? The vision tower encodes each image on its own, so
  with two images only the decoder can compare them; joined, the tower's full-attention blocks see both
  halves at once. The pair of tasks measures what that input layout is worth (issue 19's TVR frames).

Each chat is one user turn (images, then the question) and a one-word answer; accuracy is whether the
argmax of the first answer token is right (teacher-forced, held-out chats from another seed). The answer
words of a task must start with different tokens (checked). ``learn`` trains with the SFT trainer's own
loss (:func:`spatialrl.train.sft.token_loss`) and encoder, so what it measures is the model and recipe the
trainers use. Measured on the 2-core VM: ``benchmarks/vision_learnability.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

COLORS: dict[str, tuple[int, int, int]] = {"red": (200, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 200)}
GRID = 4  # same_pattern: cells per side
TASKS = ("color", "second", "same_color", "same_pattern", "same_pattern_joined")
ANSWERS: dict[str, tuple[str, ...]] = {"color": tuple(COLORS), "second": tuple(COLORS),
                                       "same_color": ("yes", "no"), "same_pattern": ("yes", "no"),
                                       "same_pattern_joined": ("yes", "no")}
QUESTIONS = {
    "color": "What color is the picture? Answer red, green or blue.",
    "second": "What color is the second picture? Answer red, green or blue.",
    "same_color": "Are the two pictures the same color? Answer yes or no.",
    "same_pattern": "Are the two pictures identical? Answer yes or no.",
    "same_pattern_joined": "Are the left and right halves of the picture identical? Answer yes or no.",
}


def _solid(rng: np.random.Generator, name: str, height: int, width: int) -> np.ndarray:
    noise = rng.normal(0.0, 30.0, (height, width, 3))
    return np.clip(np.asarray(COLORS[name], np.float64) + noise, 0, 255).astype(np.uint8)


def _pattern(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    cells = rng.integers(0, 256, (GRID, GRID, 3), dtype=np.uint8)
    rows = np.arange(height) * GRID // height
    cols = np.arange(width) * GRID // width
    return cells[rows[:, None], cols[None, :]]


def make_chat(task: str, rng: np.random.Generator, height: int = 64, width: int = 112) -> list[dict[str, Any]]:
    """One ``task`` chat (user: images + question; assistant: the answer), drawn from ``rng``."""
    if task not in TASKS:
        raise ValueError(f"unknown image task {task!r}; known: {', '.join(TASKS)}")
    colors = list(COLORS)
    if task in ("same_pattern", "same_pattern_joined"):
        first = _pattern(rng, height, width)
        same = bool(rng.random() < 0.5)
        images = [first, first.copy() if same else _pattern(rng, height, width)]
        if task == "same_pattern_joined":  # the same draws, one image: left half, right half
            images = [np.concatenate(images, axis=1)]
        answer = "yes" if same else "no"
    else:
        if task == "same_color":  # balanced: half the pairs share a colour
            a = colors[int(rng.integers(3))]
            b = a if rng.random() < 0.5 else colors[(colors.index(a) + 1 + int(rng.integers(2))) % 3]
            names = [a, b]
        else:
            names = [colors[int(rng.integers(3))] for _ in range(1 if task == "color" else 2)]
        images = [_solid(rng, n, height, width) for n in names]
        answer = names[-1] if task != "same_color" else ("yes" if names[0] == names[1] else "no")
    content = [{"type": "image", "image": im} for im in images] + [{"type": "text", "text": QUESTIONS[task]}]
    return [{"role": "user", "content": content},
            {"role": "assistant", "content": [{"type": "text", "text": answer}]}]


def check_answer_tokens(processor: Any, task: str) -> None:
    """Raise ``ValueError`` if two answers of ``task`` share their first token (first-token accuracy
    would then not tell the answers apart)."""
    tokenizer = getattr(processor, "tokenizer", processor)
    firsts = {a: tokenizer(a, add_special_tokens=False)["input_ids"][:1] for a in ANSWERS[task]}
    if len({tuple(v) for v in firsts.values()}) != len(firsts):
        raise ValueError(f"{task}: answers {sorted(firsts)} share a first token under this tokenizer: {firsts}")


def _encode(processor: Any, model: Any, chats: list[list[dict[str, Any]]]) -> dict[str, torch.Tensor]:
    from spatialrl.models.encode import encode_conversations

    device = next(model.parameters()).device
    batch = encode_conversations(processor, chats, model_type=model.config.model_type)
    return {k: v.to(device) for k, v in batch.items()}


@torch.no_grad()
def answer_accuracy(model: Any, processor: Any, chats: list[list[dict[str, Any]]], batch_size: int = 32) -> float:
    """Share of ``chats`` whose first answer token is the argmax at its position (teacher-forced)."""
    from spatialrl.models.encode import IGNORE_INDEX

    was_training = model.training
    model.eval()
    right = 0
    for start in range(0, len(chats), batch_size):
        batch = _encode(processor, model, chats[start:start + batch_size])
        labels = batch.pop("labels")
        logits = model(**batch, use_cache=False).logits
        supervised = labels != IGNORE_INDEX
        first = supervised.float().argmax(dim=1)  # the first answer token of each row
        rows = torch.arange(len(labels), device=labels.device)
        right += int((logits[rows, first - 1].argmax(-1) == labels[rows, first]).sum())
    model.train(was_training)
    return right / max(1, len(chats))


def learn(model: Any, processor: Any, task: str, *, steps: int, batch_size: int = 16, lr: float = 1e-3,
          warmup: int = 50, max_grad_norm: float = 1.0, seed: int = 0, heldout: int = 64, eval_every: int = 50,
          threshold: float = 0.9, patience: int = 2, height: int = 64, width: int = 112,
          on_eval: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """Train ``model`` on fresh ``task`` chats (AdamW, linear warmup then constant LR, clipping) and score
    held-out chats every ``eval_every`` updates; stop early once ``patience`` scores in a row reach
    ``threshold``. Returns ``{"curve": [[step, acc], ...], "steps_to_threshold", "best", "final",
    "seconds", "seconds_per_step"}``; ``steps_to_threshold`` is the first step of the run of passing
    scores (None if never reached)."""
    from spatialrl.models.family import model_family
    from spatialrl.train.sft import token_loss

    model_family(model).prepare_model(model)  # as the trainers do (Qwen: batched vision attention)
    check_answer_tokens(processor, task)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    held = [make_chat(task, np.random.default_rng([seed, 10_000 + i]), height, width) for i in range(heldout)]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    model.train()
    curve: list[list[float]] = []
    passing: int | None = None
    streak = 0
    start = time.perf_counter()
    step = 0
    for step in range(1, steps + 1):
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, step / max(1, warmup))
        batch = _encode(processor, model, [make_chat(task, rng, height, width) for _ in range(batch_size)])
        loss_sum, count, _ = token_loss(model, batch)
        (loss_sum / count.clamp(min=1)).backward()
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % eval_every == 0 or step == steps:
            acc = answer_accuracy(model, processor, held)
            curve.append([step, acc])
            if on_eval is not None:
                on_eval(step, acc)
            streak = streak + 1 if acc >= threshold else 0
            if streak == 1:
                passing = step
            elif streak == 0:
                passing = None
            if streak >= patience:
                break
    seconds = time.perf_counter() - start
    accs = [a for _, a in curve]
    return {"task": task, "steps_run": step, "curve": curve, "steps_to_threshold": passing,
            "best": max(accs), "final": accs[-1], "seconds": seconds, "seconds_per_step": seconds / max(1, step),
            "chance": 1.0 / len(ANSWERS[task])}
