"""When the RL trainers reuse image features: one cache per update's rollouts, and whether the scoring
and training forwards may read it (``agents/vision_cache.py`` holds the cache itself)."""

from __future__ import annotations

from typing import Any

from spatialrl.agents.vision_cache import VisionCache


def rollout_vision_cache(model: Any, sampling_cfg: Any) -> VisionCache | None:
    """A fresh image-feature cache for one update (weights are fixed within its rollouts and scoring), or
    None when it is off or the model family is not supported (``agents/vision_cache.py``)."""
    if sampling_cfg.vision_cache_mb <= 0 or not VisionCache.supports(model):
        return None
    return VisionCache(sampling_cfg.vision_cache_mb)


def scoring_vision(cache: VisionCache | None, model: Any, unwrapped: Any) -> tuple[VisionCache, Any] | None:
    """``(cache, unwrapped)`` for the old-log-prob and training forwards, or None for both.

    Both passes must get image features the same way: a cached feature (encoded in a rollout batch) and
    one recomputed in another batch differ in bf16 on a GPU, which would show up as ratio drift. The
    training forward can take cached features only when the vision tower is frozen and the model is not
    wrapped (DDP/DeepSpeed input scattering is not known to carry transformers' encoder-output objects).
    """
    if cache is None or model is not unwrapped or VisionCache.tower_trainable(unwrapped):
        return None
    return cache, unwrapped


def vision_cache_metrics(cache: VisionCache | None) -> dict[str, float]:
    """``charts/images_encoded`` and ``charts/images_cached`` of one update's rollouts."""
    if cache is None:
        return {}
    return {"charts/images_encoded": float(cache.misses), "charts/images_cached": float(cache.hits)}
