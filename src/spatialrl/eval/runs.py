"""A run folder: its config (``run.json``), records, and the checks that make resume safe."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spatialrl.errors import SpatialRLError
from spatialrl.io import atomic_write_json, read_jsonl

# Keys of run.json that must match for a run folder to be resumed (a different agent, task or data
# in the same folder would silently mix results).
_IDENTITY_KEYS = ("task", "agent", "options", "sampling")


def open_run_dir(out: Path, config: dict[str, Any], overwrite: bool = False) -> None:
    """Create ``out`` for ``config`` or check that an existing run there is the same run (resume)."""
    run_json = out / "run.json"
    if out.exists() and overwrite:
        shutil.rmtree(out)
    if run_json.exists():
        import json

        old = json.loads(run_json.read_text())
        diff = [k for k in _IDENTITY_KEYS if old.get(k) != config.get(k)]
        if diff:
            raise SpatialRLError(
                f"{run_json} belongs to a different run (differs in: {', '.join(diff)}); "
                "choose another --out or pass --overwrite"
            )
        return
    if out.exists() and any(out.iterdir()):
        raise SpatialRLError(f"{out} exists and is not a spatialrl run folder; choose another --out")
    atomic_write_json(run_json, config)


@dataclass
class RunRecords:
    path: Path
    config: dict[str, Any]
    episodes: list[dict[str, Any]]
    steps: list[dict[str, Any]]

    @property
    def label(self) -> str:
        return self.config.get("label") or self.config.get("agent", self.path.name)


def load_run(path: str | Path) -> RunRecords:
    import json

    path = Path(path)
    run_json = path / "run.json"
    if not run_json.exists():
        raise SpatialRLError(f"{path} is not a run folder (no run.json)")
    return RunRecords(
        path=path,
        config=json.loads(run_json.read_text()),
        episodes=list(read_jsonl(path / "episodes.jsonl")),
        steps=list(read_jsonl(path / "steps.jsonl")),
    )
