"""Per-image vision-encoder cache for multi-turn rollouts of Qwen-family VLMs.

Why: a multi-turn agent re-reads its whole conversation every turn, so without a cache every earlier
frame goes through the vision tower again — TVR's view-all memory (VA) re-encoded 1,636 images to
play 4 episodes of ~20 turns where 144 were distinct (``benchmarks/tvr_memory_cost.py``). The vision
tower of Qwen2/2.5/3-VL encodes each image independently (attention is limited to one image's
patches), so its output for an image depends only on that image's patches, its grid and the weights:
those features can be kept and handed to the model through transformers' ``mm_encoder_outputs``
argument (``forward`` and ``generate`` both take it) instead of ``pixel_values``.

Keys: SHA-256 of the image's processed patches (on the CPU, before they go to the device, so cached
images are never transferred) + its ``(t, h, w)`` grid + the autocast state. Entries live on the model's
device, evicted least-recently-used beyond ``max_mb``.

When the weights change the features go stale. The cache clears itself when the vision tower's
parameters change identity or in-place version (``Tensor._version``, bumped by optimizer steps that
go through autograd-visible in-place ops) or a PEFT adapter on it is switched; writes through
``.data`` or fused optimizer kernels may not bump versions, so trainers use one fresh cache per rollout
phase (weights are fixed inside one) and callers that change weights otherwise call :meth:`clear`.
While gradients are enabled and the tower is trainable the cache is bypassed (features must carry
their graph).
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from collections import OrderedDict
from typing import Any

import torch

SUPPORTED_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")


def _vision_tower(model: Any) -> torch.nn.Module | None:
    """The ``visual`` submodule of a (possibly PEFT- or DDP-wrapped) Qwen-VL model."""
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] == "visual":
            return module
    return None


def _accepts_encoder_outputs(model: Any) -> bool:
    """Whether the model's forward takes ``mm_encoder_outputs`` (transformers >= 5.2x; older releases
    always encode ``pixel_values``, and then the cache stays off)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(inner, "module", inner)
    try:
        return "mm_encoder_outputs" in inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        return False


def _adapter_layers(tower: torch.nn.Module) -> list[Any]:
    """PEFT adapter layers inside the tower (their switches change features without touching weights).
    A model with adapters was built by peft, so peft is imported already; otherwise there are none."""
    if "peft" not in sys.modules:
        return []
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for m in tower.modules() if isinstance(m, BaseTunerLayer)]


class VisionCache:
    """LRU cache of per-image vision features; :meth:`prepare` swaps ``pixel_values`` for them."""

    def __init__(self, max_mb: float = 1024):
        if max_mb <= 0:
            raise ValueError(f"vision cache size must be > 0 MB (got {max_mb}); pass no cache to turn it off")
        self.max_bytes = int(max_mb * 2**20)
        self._entries: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
        self._bytes = 0
        self._signature: tuple | None = None
        self._output_cls: type | None = None
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    @staticmethod
    def supports(model: Any) -> bool:
        """A Qwen-family model with a ``visual`` tower whose forward accepts precomputed features."""
        return (getattr(model.config, "model_type", None) in SUPPORTED_FAMILIES and _vision_tower(model) is not None
                and _accepts_encoder_outputs(model))

    @staticmethod
    def tower_trainable(model: Any) -> bool:
        """Whether any vision-tower parameter takes gradients (then training forwards bypass the cache)."""
        tower = _vision_tower(model)
        return tower is not None and any(p.requires_grad for p in tower.parameters())

    # ------------------------------------------------------------------ validity
    def _check_weights(self, model: Any, tower: torch.nn.Module) -> None:
        params = tuple((p.data_ptr(), p._version) for p in tower.parameters())
        adapters = tuple((bool(m.disable_adapters), tuple(m.active_adapters)) for m in _adapter_layers(tower))
        signature = (id(model), params, adapters)
        if signature != self._signature:
            self.clear()
            self._signature = signature

    # ------------------------------------------------------------------ main entry
    def prepare(self, model: Any, inputs: dict[str, torch.Tensor], device: torch.device | str | None = None) -> dict[str, Any]:
        """``inputs`` on ``device`` with ``pixel_values`` replaced by ``mm_encoder_outputs`` (cached or
        freshly encoded features); unchanged (only moved) when the model or inputs are not supported or
        the vision tower needs gradients."""
        tower = _vision_tower(model) if self.supports(model) else None
        pixels, grid = inputs.get("pixel_values"), inputs.get("image_grid_thw")
        trainable = tower is not None and torch.is_grad_enabled() and any(p.requires_grad for p in tower.parameters())
        if tower is None or pixels is None or grid is None or trainable:
            return {k: (v.to(device) if device is not None and isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
        self._check_weights(model, tower)
        device = torch.device(device) if device is not None else pixels.device
        sizes = grid.prod(-1).tolist()
        chunks = torch.split(pixels, sizes)
        context = (str(pixels.dtype), self._autocast_state(device))
        keys = [self._key(chunk, row, context) for chunk, row in zip(chunks, grid.tolist(), strict=True)]

        missing = list(dict.fromkeys(k for k in keys if k not in self._entries))  # G copies share images
        if missing:
            first = {k: i for i, k in reversed(list(enumerate(keys)))}
            idx = [first[k] for k in missing]
            encoded = model.get_image_features(torch.cat([chunks[i] for i in idx]).to(device),
                                               grid[idx].to(device), return_dict=True)
            self._output_cls = type(encoded)
            deep = getattr(encoded, "deepstack_features", None)
            for j, key in enumerate(missing):
                entry = {"pooler_output": encoded.pooler_output[j].detach()}
                if deep is not None:
                    entry["deepstack_features"] = [layer[j].detach() for layer in deep]
                self._store(key, entry)
        self.misses += len(missing)
        self.hits += len(keys) - len(missing)

        entries = []
        for key in keys:
            self._entries.move_to_end(key)
            entries.append(self._entries[key])
        fields: dict[str, Any] = {"pooler_output": tuple(e["pooler_output"] for e in entries)}
        if "deepstack_features" in entries[0]:
            layers = len(entries[0]["deepstack_features"])
            fields["deepstack_features"] = [tuple(e["deepstack_features"][i] for e in entries) for i in range(layers)]
        assert self._output_cls is not None
        out = {k: v.to(device) for k, v in inputs.items() if k != "pixel_values" and isinstance(v, torch.Tensor)}
        out["mm_encoder_outputs"] = {"image": self._output_cls(**fields)}
        self._evict(keep=set(keys))
        return out

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _autocast_state(device: torch.device) -> tuple:
        kind = device.type if device.type in ("cuda", "cpu") else "cpu"
        if torch.is_autocast_enabled(kind):
            return (kind, str(torch.get_autocast_dtype(kind)))
        return ()

    @staticmethod
    def _key(chunk: torch.Tensor, grid_row: list[int], context: tuple) -> tuple:
        data = chunk.detach()
        if data.device.type != "cpu":
            data = data.cpu()
        digest = hashlib.sha256(data.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
        return (digest, tuple(grid_row), context)

    def _store(self, key: tuple, entry: dict[str, Any]) -> None:
        size = entry["pooler_output"].numel() * entry["pooler_output"].element_size()
        size += sum(t.numel() * t.element_size() for t in entry.get("deepstack_features", []))
        entry["bytes"] = size
        self._entries[key] = entry
        self._bytes += size

    def _evict(self, keep: set[tuple]) -> None:
        """Drop least-recently-used entries beyond ``max_bytes`` (never the ones this call returned)."""
        for key in list(self._entries):
            if self._bytes <= self.max_bytes:
                break
            if key in keep:
                continue
            self._bytes -= self._entries.pop(key)["bytes"]
