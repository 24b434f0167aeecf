"""Per-image vision-encoder cache for multi-turn rollouts and repeated scoring passes.

Why: a multi-turn agent re-reads its whole conversation every turn, so without a cache every earlier
frame goes through the vision tower again — TVR's view-all memory (VA) re-encoded 1,636 images to
play 4 episodes of ~20 turns where 144 were distinct (``benchmarks/tvr_memory_cost.py``). And PPO
scores every sample once, then trains on it for several epochs: with a frozen tower the image
features are the same every time.

Both supported families encode each image independently (attention stays inside one image), so an
image's features depend only on its pixels, its layout and the weights:

* Qwen2/2.5/3-VL: features per image from ``get_image_features``, handed back through transformers'
  ``mm_encoder_outputs`` argument (``forward`` and ``generate``; transformers >= 5.2x — older releases
  lack it, and the cache stays off);
* Mllama (Llama-3.2-Vision): the projected ``cross_attention_states`` of each image slot (tiles ×
  patches × hidden; an empty slot is one cached zero image), assembled per sample, for plain forward
  passes only (``generate`` keeps its own cross-attention cache).

Keys: SHA-256 of the image's processed pixels (on the CPU, before they go to the device, so cached
images are never transferred) + its layout (Qwen grid; Mllama aspect ratio and tile mask) + the
autocast state. Entries live on the model's device, evicted least-recently-used beyond ``max_mb``.

When the weights change the features go stale. The cache clears itself when the vision parameters
change identity or in-place version (``Tensor._version``, bumped by optimizer steps that go through
autograd-visible in-place ops) or a PEFT adapter on them is switched; writes through ``.data`` or fused
optimizer kernels may not bump versions, so trainers use one fresh cache per rollout phase (weights
are fixed inside one) and callers that change weights otherwise call :meth:`clear`. While gradients
are enabled and the tower is trainable the cache is bypassed (features must carry their graph).
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import torch

# Which families the cache serves, and how, is the family adapter's ``vision_features``
# (``models/family.py``); the names below stay importable from here (train/common.py, tests).
from spatialrl.lru import MegabyteCache
from spatialrl.models.encode import pixel_digest
from spatialrl.models.family import FAMILIES, QWEN_FAMILIES, VISION_MODULE_NAMES, model_family
from spatialrl.models.sampling import transformers_model

SUPPORTED_FAMILIES = tuple(name for name, f in FAMILIES.items() if f.vision_features)
__all__ = ["QWEN_FAMILIES", "SUPPORTED_FAMILIES", "VISION_MODULE_NAMES", "VisionCache"]


def _family(model: Any) -> str | None:
    """How cached features reach the model: ``"qwen"``, ``"mllama"`` or None (not supported)."""
    return model_family(model).vision_features


def _towers(model: Any) -> list[torch.nn.Module]:
    """The vision modules (Qwen ``visual``; Mllama ``vision_model`` + ``multi_modal_projector``) of a
    possibly PEFT- or DDP-wrapped model."""
    return [m for name, m in model.named_modules() if name.rsplit(".", 1)[-1] in VISION_MODULE_NAMES]


def _accepts(model: Any, argument: str) -> bool:
    """Whether the model's forward takes ``argument`` (precomputed vision features)."""
    try:
        return argument in inspect.signature(transformers_model(model).forward).parameters
    except (TypeError, ValueError):
        return False


def _adapter_layers(towers: list[torch.nn.Module]) -> list[Any]:
    """PEFT adapter layers inside the towers (their switches change features without touching weights).
    A model with adapters was built by peft, so peft is imported already; otherwise there are none."""
    if "peft" not in sys.modules:
        return []
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for t in towers for m in t.modules() if isinstance(m, BaseTunerLayer)]


def _moved(inputs: dict[str, Any], device: Any) -> dict[str, Any]:
    return {k: (v.to(device) if device is not None and isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}


class VisionCache(MegabyteCache):
    """LRU cache of per-image vision features; :meth:`prepare` swaps the pixels for them."""

    what = "vision cache"

    def __init__(self, max_mb: float = 1024):
        super().__init__(max_mb, size=lambda entry: entry["bytes"])
        self._signature: tuple | None = None
        self._output_cls: type | None = None
        self.hits = 0
        self.misses = 0

    @staticmethod
    def supports(model: Any, generate: bool = False) -> bool:
        """Whether ``prepare`` can serve this model (for ``generate`` calls: Qwen families only)."""
        family = _family(model)
        if family == "qwen":
            return _accepts(model, "mm_encoder_outputs") and bool(_towers(model))
        if family == "mllama" and not generate:
            return _accepts(model, "cross_attention_states") and bool(_towers(model))
        return False

    @staticmethod
    def tower_trainable(model: Any, towers: list[torch.nn.Module] | None = None) -> bool:
        """Whether any vision parameter takes gradients (then training forwards bypass the cache)."""
        return any(p.requires_grad for t in (towers if towers is not None else _towers(model)) for p in t.parameters())

    # ------------------------------------------------------------------ validity
    def _check_weights(self, towers: list[torch.nn.Module]) -> None:
        params = tuple((p.data_ptr(), p._version) for t in towers for p in t.parameters())
        adapters = tuple((bool(m.disable_adapters), tuple(m.active_adapters)) for m in _adapter_layers(towers))
        # Features depend on the towers alone, so two models sharing one tower (a merged-LoRA rollout copy,
        # train/merged_rollout.py, and the trained model) share the entries.
        signature = (params, adapters)
        if signature != self._signature:
            self.clear()
            self._signature = signature

    # ------------------------------------------------------------------ main entry
    def prepare(self, model: Any, inputs: dict[str, torch.Tensor], device: torch.device | str | None = None,
                generate: bool = False) -> dict[str, Any]:
        """``inputs`` on ``device`` with the pixels replaced by cached or freshly encoded features
        (Qwen: ``mm_encoder_outputs``; Mllama: ``cross_attention_states``); only moved when the model,
        the call (``generate``) or the inputs are not supported or the vision tower needs gradients."""
        family = _family(model)
        if inputs.get("pixel_values") is None or not self.supports(model, generate):
            return _moved(inputs, device)
        towers = _towers(model)
        if torch.is_grad_enabled() and self.tower_trainable(model, towers):
            return _moved(inputs, device)
        self._check_weights(towers)
        device = torch.device(device) if device is not None else inputs["pixel_values"].device
        if family == "mllama":
            return self._prepare_mllama(model, inputs, device)
        return self._prepare_qwen(model, inputs, device)

    def _lookup(self, keys: list[tuple], encode) -> list[dict[str, Any]]:
        """Entries for ``keys`` (in order), encoding the missing ones once each: ``encode(first_index
        of each missing key) -> list of entries``."""
        missing = list(dict.fromkeys(k for k in keys if k not in self._entries))  # G copies share images
        fresh: dict[tuple, dict[str, Any]] = {}  # also the entries too large to keep
        if missing:
            first = {k: i for i, k in reversed(list(enumerate(keys)))}
            for key, entry in zip(missing, encode([first[k] for k in missing]), strict=True):
                self._store(key, entry)
                fresh[key] = entry
        self.misses += len(missing)
        self.hits += len(keys) - len(missing)
        entries = [fresh.get(key) or self._entries.get(key) for key in keys]
        self._entries.trim(keep=keys)  # never the entries this call returns
        return entries

    def _prepare_qwen(self, model: Any, inputs: dict[str, torch.Tensor], device: torch.device) -> dict[str, Any]:
        pixels, grid = inputs["pixel_values"], inputs["image_grid_thw"]
        chunks = torch.split(pixels, grid.prod(-1).tolist())
        context = (str(pixels.dtype), self._autocast_state(device))
        keys = [self._key(chunk, row, context) for chunk, row in zip(chunks, grid.tolist(), strict=True)]

        def encode(idx: list[int]) -> list[dict[str, Any]]:
            encoded = model.get_image_features(torch.cat([chunks[i] for i in idx]).to(device), grid[idx].to(device),
                                               return_dict=True)
            self._output_cls = type(encoded)
            deep = getattr(encoded, "deepstack_features", None)
            out = []
            for j in range(len(idx)):
                entry = {"pooler_output": encoded.pooler_output[j].detach()}
                if deep is not None:
                    entry["deepstack_features"] = [layer[j].detach() for layer in deep]
                out.append(entry)
            return out

        entries = self._lookup(keys, encode)
        fields: dict[str, Any] = {"pooler_output": tuple(e["pooler_output"] for e in entries)}
        if "deepstack_features" in entries[0]:
            layers = len(entries[0]["deepstack_features"])
            fields["deepstack_features"] = [tuple(e["deepstack_features"][i] for e in entries) for i in range(layers)]
        assert self._output_cls is not None
        out = {k: v.to(device) for k, v in inputs.items() if k != "pixel_values" and isinstance(v, torch.Tensor)}
        out["mm_encoder_outputs"] = {"image": self._output_cls(**fields)}
        return out

    def _prepare_mllama(self, model: Any, inputs: dict[str, torch.Tensor], device: torch.device) -> dict[str, Any]:
        pixels, ratio_ids, ratio_mask = inputs["pixel_values"], inputs["aspect_ratio_ids"], inputs["aspect_ratio_mask"]
        batch, slots, tiles = ratio_mask.shape
        # Every slot, empty ones (zero pixels) included: HF's cross-attention lets a text row that sees no
        # image attend to all slots' states (only its MLP output is masked), so their values matter.
        real = [(b, i) for b in range(batch) for i in range(slots)]
        context = (str(pixels.dtype), self._autocast_state(device))
        keys = [self._key(pixels[b, i], [int(ratio_ids[b, i]), *ratio_mask[b, i].tolist()], context) for b, i in real]
        inner = transformers_model(model)
        inner = getattr(inner, "model", inner)

        def encode(idx: list[int]) -> list[dict[str, Any]]:
            pos = [real[j] for j in idx]
            vision = inner.vision_model(
                pixel_values=torch.stack([pixels[b, i] for b, i in pos])[:, None].to(device),
                aspect_ratio_ids=torch.stack([ratio_ids[b, i] for b, i in pos])[:, None].to(device),
                aspect_ratio_mask=torch.stack([ratio_mask[b, i] for b, i in pos])[:, None].to(device),
            ).last_hidden_state
            states = inner.multi_modal_projector(vision)  # (n, 1, tiles, patches, hidden)
            return [{"states": states[j, 0].detach()} for j in range(len(pos))]

        entries = self._lookup(keys, encode)
        states = torch.stack([e["states"] for e in entries]).view(batch, slots, *entries[0]["states"].shape)
        patches, hidden = states.shape[-2:]
        out = {k: v.to(device) for k, v in inputs.items()
               if k not in ("pixel_values", "aspect_ratio_ids", "aspect_ratio_mask") and isinstance(v, torch.Tensor)}
        out["cross_attention_states"] = states.reshape(-1, patches, hidden)  # the layout MllamaModel builds
        return out

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _autocast_state(device: torch.device) -> tuple:
        kind = device.type if device.type in ("cuda", "cpu") else "cpu"
        if torch.is_autocast_enabled(kind):
            return (kind, str(torch.get_autocast_dtype(kind)))
        return ()

    @staticmethod
    def _key(pixels: torch.Tensor, layout: list[int], context: tuple) -> tuple:
        return (pixel_digest(pixels), tuple(layout), context)

    def _store(self, key: tuple, entry: dict[str, Any]) -> None:
        tensors = [v for v in entry.values() if isinstance(v, torch.Tensor)] + entry.get("deepstack_features", [])
        entry["bytes"] = sum(t.numel() * t.element_size() for t in tensors)
        self._entries.put(key, entry, trim=False)
