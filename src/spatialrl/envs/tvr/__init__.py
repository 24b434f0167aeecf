"""Target Viewpoint Reproduction (TVR / TVRBench): env, lattice + move rules, oracle, bench, prompts,
metrics, report and suite. Importing this package registers the gymnasium id ``spatialrl/TVR-v0``."""

import gymnasium as gym

ENV_ID = "spatialrl/TVR-v0"

if ENV_ID not in gym.registry:
    # No TimeLimit wrapper: budgets (30 single-room / 40 multi-room) depend on the task, so the env
    # truncates itself.
    gym.register(id=ENV_ID, entry_point="spatialrl.envs.tvr.env:TVREnv", disable_env_checker=False)
