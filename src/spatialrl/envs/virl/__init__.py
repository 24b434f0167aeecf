"""V-IRL street-view navigation, compatible with the real SFTvsRL data (`nyc_1k_routes/`, `VLN_mini/`).

Where things live: the file format in ``data.py`` (the single definition, also used by the city
generator), up-front validation in ``validate.py``, the rail and instruction text in ``rail.py``,
pixels in ``pixels.py``, answer parsing and rewards in ``verify.py``, the gymnasium env in ``env.py``,
prompts in ``prompts.py``, metrics and the reference log layout in ``metrics.py``, the eval splits in
``suite.py``. Public entry points are re-exported here lazily (importing the package stays cheap).
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "load_dataset": "spatialrl.envs.virl.validate",
    "check_dataset": "spatialrl.envs.virl.validate",
    "Problem": "spatialrl.envs.virl.data",
    "VirlDataset": "spatialrl.envs.virl.data",
    "VirlEnv": "spatialrl.envs.virl.env",
    "VirlPrompter": "spatialrl.envs.virl.prompts",
    "write_dataset": "spatialrl.envs.virl.testdata",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
