"""Byte-level BPE tokenizers trained on our own prompt corpora, and the chat templates that go with them.

Why train our own: the built-in model must build offline (no hub download), and a vocabulary fitted to
our prompts (directions, JSON actions, card equations) keeps prompts short, so a small model sees more
of them per token budget. Byte-level BPE never meets an unknown character, so free-form model output
always round-trips.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Iterable

from transformers import PreTrainedTokenizerFast

# Task prompt modules that expose ``tokenizer_corpus() -> list[str]``; each is used when it exists.
CORPUS_MODULES = ("spatialrl.envs.tvr.prompts", "spatialrl.envs.virl.prompts", "spatialrl.envs.gp.prompts")

# Generic texts so the tokenizer is sensible before (and beside) the task corpora.
GENERIC_CORPUS = [
    "You are an agent navigating a city. Follow the route instructions step by step.",
    "You are in a room. Reproduce the target viewpoint by moving the camera.",
    "Look at the current view and the target view, then choose one action.",
    "Action: MoveAhead", "Action: MoveBack", "Action: MoveLeft", "Action: MoveRight",
    "Action: RotateLeft", "Action: RotateRight", "Action: LookUp", "Action: LookDown", "Action: Stop",
    "Turn left at the next intersection.", "Turn right onto the avenue.", "Go straight for two blocks.",
    "turn_direction(left)", "turn_direction(right)", "turn_direction(slightly left)",
    "turn_direction(slightly right)", "forward()", "stop()", "turn around",
    "north east south west northeast northwest southeast southwest",
    '{"current observation": "No landmark nearby", "current instruction": "Head north", "action": "forward()"}',
    '{"cards": ["J", "5", "3", "K"], "number": [11, 5, 3, 13], "formula": "(11-5)*3+6=24"}',
    "Your goal is to output a formula that evaluates to 24 using all four cards exactly once.",
    "The cards are 2, 7, 9 and Queen. Queen counts as 12. (12-9)*(7+1)=24",
    "+ - * / = ( ) 0 1 2 3 4 5 6 7 8 9 10 11 12 13 24",
    "Observation: you see a coffee shop on your left and a bank on your right.",
    "Instruction: walk until you reach the pharmacy, then turn right.",
    "You have arrived at the destination.", "Your previous action was invalid. Please try again.",
    "The target is behind you. The sofa is to the left of the table.",
    "Step 3 of 20. Previous actions: MoveAhead, RotateLeft, MoveAhead.",
    "Answer with the action only.", "Think step by step, then give the final action.",
    "Thought: the target view shows the window on the right, so I should rotate right.",
    "red green blue yellow white black gray brown orange purple pink",
    "chair table sofa bed lamp door window shelf plant television cabinet desk",
    "street avenue road intersection landmark restaurant hotel station park museum",
    "yes no left right forward backward up down ahead behind near far meters degrees",
]


def prompt_corpus() -> tuple[list[str], list[str]]:
    """All texts to train on and the names of the sources used, in a fixed order (determinism)."""
    texts = list(GENERIC_CORPUS)
    sources = ["generic"]
    for module_name in CORPUS_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name and module_name.startswith(e.name):
                continue  # that task's prompts are not written (yet)
            raise
        fn = getattr(module, "tokenizer_corpus", None)
        if fn is None:
            continue
        texts.extend(str(t) for t in fn())
        sources.append(module_name.rsplit(".", 2)[-2])
    return texts, sources


def corpus_digest(texts: Iterable[str]) -> str:
    """sha256 of a corpus, saved beside the model so a tokenizer can be traced to its training text."""
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def train_bpe_tokenizer(
    texts: list[str],
    special_tokens: list[str],
    vocab_size: int,
    chat_template: str,
    **named_tokens: str,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE in memory. Special tokens get ids ``0..k-1`` in the given order.

    ``named_tokens`` are the tokenizer roles (``eos_token=...``, ``pad_token=...``). Training is
    deterministic for a fixed corpus and vocabulary size (checked by the tests across processes).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, chat_template=chat_template, **named_tokens)


QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
    "<|video_pad|>",
]

# Qwen-style ChatML with an image placeholder wherever an image part sits, in any turn. The
# {% generation %} block marks assistant tokens so SFT can mask the loss with
# ``return_assistant_tokens_mask=True``. A newline right after a block tag is eaten by the HF Jinja
# environment (trim_blocks), hence the ``{{ '\\n' }}`` there.
QWEN_CHAT_TEMPLATE = (
    "{% macro render(content) %}{% if content is string %}{{ content }}{% else %}{% for c in content %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}{% endmacro %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ render(m['content']) }}<|im_end|>{% endgeneration %}{{ '\\n' }}"
    "{% else %}{{ render(m['content']) }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
