"""What every benchmark records beside its numbers (the machine and the git commit it ran on), and where.

Benchmarks are run as scripts (`python benchmarks/<name>.py`), so this folder is on `sys.path` and
they `from common import machine, git_commit, write_results`.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def machine() -> str:
    """Host name, CPU count and CPU model, e.g. ``vm (2 cpu, AMD EPYC 7B13)``."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()} ({os.cpu_count()} cpu, {cpu})"


def git_commit() -> str | None:
    """The checked-out commit; ``$SPATIALRL_COMMIT`` where the tree is a copy without ``.git`` (the GPU
    machine gets the working tree only); None when neither is known."""
    if os.environ.get("SPATIALRL_COMMIT"):
        return os.environ["SPATIALRL_COMMIT"]
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def write_results(out_dir: str | Path, name: str, tag: str | None, result: dict) -> Path:
    """``result`` as ``OUT_DIR/<name>-<host>[-<tag>].json``, written atomically; prints and returns the path."""
    from spatialrl.io import atomic_write_json

    out = Path(out_dir) / f"{name}-{platform.node() or 'machine'}{f'-{tag}' if tag else ''}.json"
    atomic_write_json(out, result)
    print(f"wrote {out}")
    return out
