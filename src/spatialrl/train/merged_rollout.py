"""A rollout copy of a LoRA-trained policy with its adapters merged into the weights (``sampling.merge_lora``).

Why: peft runs every adapted projection as the base matmul plus two small adapter matmuls, a scale and
an add. Decoding is one token per step, so those extra small kernels cost about as much as the big
ones: on one H200 the random 11B with LoRA r 16 took 13.2 s for a PPO update's two generate calls with
the static KV cache and 35.6 s with the dynamic one, where ``benchmarks/decode_speed.py`` decodes the
same batches without adapters in about 8.1 and 10.9 s (docs/rl.md, "The 11B with every lever on").

The copy holds ``W + scale · B A`` for every adapted layer and shares every module without adapters
that it can — the vision tower and projector — with the trained model (so no second tower in memory,
and the rollout's vision cache sees the trained model's tower). :meth:`refresh` rewrites the merged
weights in place from the current adapters once per update; in-place writes keep the tensors a
compiled decoder (``sampling.kv_cache: static``) captured.

What changes: sampled answers come from the merged weights, which round ``W + scale · B A`` to the
weight dtype once instead of adding the adapter's output per token, so in bf16 the recorded sampling
log-probs differ from a training forward in the last bits (in fp32 on the CPU they agree to ~1e-6,
tested). Neither trainer uses sampling log-probs in its loss — the scoring pass fixes π_old — so the
updates see the same kind of numbers as without the copy. Costs one more copy of the language model's
weights in device memory (21 GB for the 11B in bf16).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from spatialrl.agents.vision_cache import _towers
from spatialrl.errors import DataError


class MergedRollout:
    """``model``: a plain (non-peft) copy of ``peft_model`` with the adapters merged, for generation only."""

    def __init__(self, peft_model: Any):
        try:
            from peft.tuners.lora import LoraLayer
        except ImportError:
            raise DataError("sampling.merge_lora needs peft (pip install peft)") from None
        if not hasattr(peft_model, "get_base_model"):
            raise DataError("sampling.merge_lora: the policy has no LoRA adapters (set model.lora.enabled: true)")
        base = peft_model.get_base_model()
        layers = {name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)}
        if not layers:
            raise DataError("sampling.merge_lora: the policy has no LoRA layers")
        # share the modules the adapters do not touch and that are large: the vision tower and projector
        shared = _towers(base)
        memo: dict[int, Any] = {}
        for module in shared:
            for obj in (module, *module.parameters(), *module.buffers()):
                memo[id(obj)] = obj
        dup = copy.deepcopy(base, memo)
        for name in layers:  # replace each LoRA wrapper in the copy by its base layer
            parent_name, _, child = name.rpartition(".")
            parent = dup.get_submodule(parent_name) if parent_name else dup
            setattr(parent, child, dup.get_submodule(name).get_base_layer())
        tower = {id(p) for m in shared for p in m.parameters()}  # the trained model's: left as they are
        for p in dup.parameters():
            if id(p) not in tower:
                p.requires_grad_(False)
        dup.eval()
        self.model = dup
        self._pairs = [(layers[name], dup.get_submodule(name)) for name in layers]
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        """Merged weights := base weight + every active adapter's delta, in place (after optimiser steps)."""
        for lora, target in self._pairs:
            # out of place: .float() of an fp32 weight is the weight itself, which must stay untouched
            merged = lora.get_base_layer().weight.detach().float().clone()
            for adapter in lora.active_adapters:
                if adapter in lora.lora_A:
                    merged.add_(lora.get_delta_weight(adapter).float())
            target.weight.copy_(merged.to(target.weight.dtype))


def merged_rollout(sampling_cfg: Any, model: Any) -> MergedRollout | None:
    """The merged copy when ``sampling.merge_lora`` is on, else None."""
    return MergedRollout(model) if sampling_cfg.merge_lora else None


def rollout_model(merged: MergedRollout | None, model: Any) -> Any:
    """The model a rollout samples from: the merged copy brought up to the current adapters, or ``model``."""
    if merged is None:
        return model
    merged.refresh()
    return merged.model
