"""``--agent`` specs to policies: ``hf:PATH``, ``openai:MODEL@URL``, ``builtin:NAME``, ``expert``, ``random``.

Heavy libraries (torch, transformers) are imported only for the specs that need them, so the CLI stays
fast for ``expert``/``random``/``openai``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from spatialrl.agents.base import Policy
from spatialrl.errors import DataError

SPEC_HELP = "hf:PATH | openai:MODEL@URL | builtin:NAME | expert | random"
DEFAULT_OPENAI_URL = "https://api.openai.com/v1"


def split_openai_spec(rest: str) -> tuple[str, str]:
    """``MODEL@URL`` -> (model, url). The URL starts at the last ``@http`` so model names may contain ``@``;
    without a URL, ``$OPENAI_BASE_URL`` or OpenAI's own endpoint is used."""
    idx = max(rest.rfind("@http://"), rest.rfind("@https://"))
    if idx > 0:
        return rest[:idx], rest[idx + 1 :]
    if "@" in rest:
        model, url = rest.rsplit("@", 1)
        raise DataError(f"openai:{rest}: URL {url!r} must start with http:// or https://")
    if not rest:
        raise DataError("openai: spec needs a model name: openai:MODEL@URL")
    return rest, os.environ.get("OPENAI_BASE_URL", DEFAULT_OPENAI_URL)


def load_policy(
    spec: str,
    *,
    device: str | None = None,
    dtype: str | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    concurrency: int = 8,
    timeout: float = 60.0,
    max_retries: int = 5,
    max_wait: float = 60.0,
    seed: int = 0,
    **kwargs: Any,
) -> Policy:
    """Build the policy a spec names. ``device`` defaults to cuda when available; ``dtype`` (``bf16``,
    ``fp16``, ``fp32``) to bf16 on GPU and fp32 on CPU. Extra ``kwargs`` go to the policy's constructor
    (e.g. ``max_pixels``, ``max_batch_size`` for local models). ``timeout`` (seconds per attempt),
    ``max_retries`` and ``max_wait`` (longest ``Retry-After`` honoured) apply to ``openai:`` specs."""
    kind, _, rest = spec.partition(":")
    if kind == "expert" and not rest:
        from spatialrl.agents.expert import ExpertPolicy

        return ExpertPolicy(**kwargs)
    if kind == "random" and not rest:
        from spatialrl.agents.random import RandomPolicy

        return RandomPolicy(seed=seed, **kwargs)
    if kind == "openai":
        model, url = split_openai_spec(rest)
        return _openai(model, url, api_key_env, concurrency, timeout, max_retries, max_wait, kwargs)
    if kind == "hf":
        if not rest:
            raise DataError("hf: spec needs a model folder: hf:PATH")
        path = Path(rest).expanduser()
        if not path.exists():
            raise DataError(f"hf:{rest}: model folder {path} does not exist")
        from spatialrl.agents.hf import HFPolicy

        return HFPolicy.from_pretrained(path, device=device, dtype=_torch_dtype(dtype), **kwargs)
    if kind == "builtin":
        return load_builtin_policy(rest, device=device, dtype=dtype, **kwargs)
    raise DataError(f"unknown agent spec {spec!r}; expected {SPEC_HELP}")


def load_builtin_policy(name: str, *, device: str | None = None, dtype: str | None = None, **kwargs: Any) -> Policy:
    """``builtin:NAME``: a shipped trained model, or ``<preset>-random`` built on the fly with weight seed 0
    (fixed, so ``builtin:tiny-random`` names one model whatever the run's sampling seed)."""
    from spatialrl.models.builtin import resolve_builtin

    target = resolve_builtin(name)
    from spatialrl.agents.hf import HFPolicy

    kwargs.setdefault("name", f"builtin:{name}")
    if isinstance(target, Path):
        return HFPolicy.from_pretrained(target, device=device, dtype=_torch_dtype(dtype), **kwargs)
    from spatialrl.models.builtin import build_model

    model, processor, _ = build_model(target, seed=0)
    return HFPolicy(model, processor, device=device, dtype=_torch_dtype(dtype), **kwargs)


def _openai(model: str, url: str, api_key_env: str, concurrency: int, timeout: float, max_retries: int,
            max_wait: float, kwargs: dict[str, Any]) -> Policy:
    from spatialrl.agents.openai_api import OpenAIPolicy

    return OpenAIPolicy(model, base_url=url, api_key_env=api_key_env, concurrency=concurrency, timeout=timeout,
                        max_retries=max_retries, max_wait=max_wait, **kwargs)


def _torch_dtype(name: str | None) -> Any:
    if name is None:
        return None
    import torch

    table = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
             "fp32": torch.float32, "float32": torch.float32}
    if name not in table:
        raise DataError(f"--dtype {name!r}: expected one of {', '.join(table)}")
    return table[name]
