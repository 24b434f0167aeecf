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


def config_differences(old: Any, new: Any, key: str = "") -> list[str]:
    """``["options.memory: 'va' in run.json, 'ao' now", ...]``: every leaf where two configs differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in list(old) + [k for k in new if k not in old]:
            sub = f"{key}.{k}" if key else str(k)
            if k not in new:
                out.append(f"{sub}: {old[k]!r} in run.json, not set now")
            elif k not in old:
                out.append(f"{sub}: not in run.json, {new[k]!r} now")
            else:
                out += config_differences(old[k], new[k], sub)
        return out
    return [] if old == new else [f"{key}: {old!r} in run.json, {new!r} now"]


def check_run_dir(out: Path, config: dict[str, Any], overwrite: bool = False) -> None:
    """Raise if ``out`` holds a different run or is not a run folder (changes nothing on disk)."""
    run_json = out / "run.json"
    if overwrite:
        return
    if run_json.exists():
        import json

        try:
            old = json.loads(run_json.read_text())
        except json.JSONDecodeError as e:
            raise SpatialRLError(f"{run_json}: malformed JSON ({e}); pass --overwrite to start the run again") from None
        diff = [d for k in _IDENTITY_KEYS for d in config_differences(old.get(k), config.get(k), k)]
        if diff:
            raise SpatialRLError(
                f"{run_json} belongs to a different run; it differs in {'; '.join(diff)}. "
                "Choose another --out, or pass --overwrite to delete it"
            )
        return
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SpatialRLError(f"{out} exists and is not a spatialrl run folder; choose another --out")


def open_run_dir(out: Path, config: dict[str, Any], overwrite: bool = False) -> None:
    """Create ``out`` for ``config`` or check that an existing run there is the same run (resume)."""
    check_run_dir(out, config, overwrite)
    if out.exists() and overwrite:
        shutil.rmtree(out)
    if not (out / "run.json").exists():
        atomic_write_json(out / "run.json", config)


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


def summarize_run(suite: Any, records: list[dict[str, Any]], first_errors: int = 3) -> dict[str, dict[str, Any]]:
    """The suite's metrics over the episodes that ran to their end, plus the errored ones counted apart.

    An episode that ended with an ``error`` (the policy could not answer: server down, out of memory; the
    runner's safety cap) says nothing about the agent, so it is left out of every suite metric (success
    rate included). Every row gets ``errors``: how many episodes of that category errored; the
    ``overall`` row also gets ``error_messages``: the first ``first_errors`` as ``"<episode id>: <error>"``.
    """
    from collections import Counter

    ok = [r for r in records if not r.get("error")]
    errored = [r for r in records if r.get("error")]
    metrics: dict[str, dict[str, Any]] = {k: dict(v) for k, v in suite.summarize(ok).items()} if ok else {}
    metrics.setdefault("overall", {})
    by_cat = Counter(str(r.get("category")) for r in errored)
    for cat in by_cat:
        metrics.setdefault(cat, {})
    for cat, row in metrics.items():
        row["errors"] = len(errored) if cat == "overall" else by_cat.get(cat, 0)
    metrics["overall"]["error_messages"] = [f"{r.get('episode_id')}: {r['error']}" for r in errored[:first_errors]]
    return metrics
