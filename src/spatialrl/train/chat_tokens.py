"""Moved to :mod:`spatialrl.models.encode` (issue 22: one model-I/O layer below ``train/``).

Kept for one release so ``from spatialrl.train.chat_tokens import ...`` keeps working; import from
``spatialrl.models.encode`` in new code. To be deleted in the release after.
"""

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
