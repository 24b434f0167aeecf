"""GeneralPoints: the 24-points card task of "SFT Memorizes, RL Generalizes" (see docs/gp.md).

Importing this package registers the gymnasium id ``spatialrl/GeneralPoints-v0``; the task suite
(``gp``) registers when :mod:`spatialrl.envs.gp.suite` is imported (``get_suite("gp")`` does that).
"""

from gymnasium.envs.registration import register, registry

ENV_ID = "spatialrl/GeneralPoints-v0"

if ENV_ID not in registry:
    register(id=ENV_ID, entry_point="spatialrl.envs.gp.env:GeneralPointsEnv")
