"""Moved to :mod:`spatialrl.rollout.agent_loop`; kept while trainers import it from here. ``EnvPool`` here
is the rollout loop with the trainers' token sampler bound as its act step."""

from functools import partial

from spatialrl.rollout.agent_loop import EnvPool as _EnvPool
from spatialrl.rollout.agent_loop import Sampled, Slot, Step
from spatialrl.train.policy_ops import sample_segments

EnvPool = partial(_EnvPool, sample=sample_segments)

__all__ = ["EnvPool", "Sampled", "Slot", "Step"]
