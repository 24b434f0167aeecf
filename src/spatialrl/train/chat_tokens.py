"""Moved to :mod:`spatialrl.models.encode` (issue 22: one model-I/O layer below ``train/``).

Kept for one release so ``from spatialrl.train.chat_tokens import ...`` keeps working; import from
``spatialrl.models.encode`` (and the family rules from ``spatialrl.models.family``) in new code. To be
deleted in the release after.
"""

from __future__ import annotations

from typing import Any

from spatialrl.models.encode import (  # noqa: F401  (re-exports)
    IGNORE_INDEX,
    ChatTemplateError,
    RenderedConversation,
    assistant_texts,
    assistant_token_mask,
    encode_conversations,
    prepare_messages,
    render_conversation,
)
from spatialrl.models.family import family_of


def default_fold_system(processor: Any, model_type: str | None = None) -> bool:
    """Whether the family folds the system prompt into the first user turn: now
    ``family_of(model_type, processor).fold_system``."""
    return family_of(model_type, processor).fold_system
