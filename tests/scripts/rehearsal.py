"""Run one command of a GPU script's CPU rehearsal (``SMOKE=1``) the way the GPU machine runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def rehearse(script: str, out: Path, env: dict[str, str], drop: tuple[str, ...] = (), timeout: int = 900) -> str:
    """``bash scripts/gpu/<script>`` with ``SMOKE=1``, ``OUT=out`` and ``env`` over this process's environment
    minus ``drop`` (knobs the caller's shell may set, so the script's SMOKE defaults apply); the venv's Python
    first on PATH. Asserts exit 0 and returns ``out/timeline.txt``."""
    out.mkdir()
    full = {k: v for k, v in os.environ.items() if k not in drop}
    full.update({"SMOKE": "1", "OUT": str(out), "PY": sys.executable, **env})
    full["PATH"] = f"{Path(sys.executable).parent}:{full['PATH']}"
    proc = subprocess.run(["bash", str(ROOT / "scripts/gpu" / script)], env=full, capture_output=True, text=True,
                          timeout=timeout)
    timeline = (out / "timeline.txt").read_text()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return timeline
