"""scripts/validate_candidates.py on a tiny generated bench: the shipped action-only model against a copy of
itself, two episodes. Equal successes ship at bar 0 and not at bar 1; the runs resume instead of running
again; a second arm for the same model is evaluated beside the first, which wins the tie; the paired report
and decision.json are written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts/validate_candidates.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


@pytest.mark.slow
def test_the_decision_follows_the_bar(tmp_path):
    candidate = tmp_path / "weights" / "tvr-ao-joined"
    shutil.copytree(ROOT / "src/spatialrl/models/weights/tvr-ao-sft", candidate)
    subprocess.run([sys.executable, "-m", "spatialrl.cli", "tvr", "make-bench", "--out", str(tmp_path / "bench"),
                    "--tiny", "--seed", "1"], check=True, capture_output=True)
    common = [f"tvr-ao-sft={candidate}", "--bench", str(tmp_path / "bench"), "--out", str(tmp_path / "val"),
              "--episodes", "2", "--probe-states", "4"]
    done = run(*common, "--bar", "0")
    assert done.returncode == 0, done.stderr[-2000:]
    decision = json.loads((tmp_path / "val/decision.json").read_text())
    row = decision["rows"][0]
    assert row["ships"] and row["new"]["successes"] == row["shipped"]["successes"]
    assert row["new"]["episodes"] == 2 and row["new"]["probe"] == row["shipped"]["probe"]
    assert "Paired against the baseline" in (tmp_path / "val/tvr-ao-sft-report/report.md").read_text()
    assert "ships" in done.stdout.splitlines()[-2]
    steps = (tmp_path / "val/tvr-ao-sft-candidate-tvr-ao-joined/steps.jsonl").read_text()
    second = tmp_path / "weights" / "tvr-ao-joined-dagger"
    shutil.copytree(candidate, second)
    again = run(*common, f"tvr-ao-sft={second}", "--bar", "1", "--probe-states", "0")
    assert again.returncode == 0, again.stderr[-2000:]
    rows = json.loads((tmp_path / "val/decision.json").read_text())["rows"]
    assert len(rows) == 1 and not rows[0]["ships"]
    assert [Path(c["candidate"]).name for c in rows[0]["candidates"]] == ["tvr-ao-joined", "tvr-ao-joined-dagger"]
    assert rows[0]["candidate"] == str(candidate)  # a tie goes to the first arm given
    assert (tmp_path / "val/tvr-ao-sft-candidate-tvr-ao-joined/steps.jsonl").read_text() == steps  # resumed
    assert (tmp_path / "val/tvr-ao-sft-candidate-tvr-ao-joined-dagger/episodes.jsonl").exists()
    assert "does not ship" in again.stdout and "not the best arm" in again.stdout


def test_bad_candidates_are_named(tmp_path):
    done = run("tvr-ao-sft", "--bench", str(tmp_path / "b"), "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and "expected NAME=DIR" in done.stderr
    done = run(f"tvr-ao-sft={tmp_path / 'missing'}", "--bench", str(tmp_path / "b"), "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and "is not a folder" in done.stderr
    twin = tmp_path / "x" / "w"
    twin.mkdir(parents=True)
    (tmp_path / "w").mkdir()
    done = run(f"tvr-ao-sft={tmp_path / 'w'}", f"tvr-ao-sft={twin}", "--bench", str(tmp_path / "b"),
               "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and "also named 'w'" in done.stderr
    assert not (tmp_path / "b").exists() and not (tmp_path / "o").exists()  # nothing made before the checks


def test_the_best_arm_is_chosen_by_successes_then_probe():
    sys.path.insert(0, str(SCRIPT.parent))
    from validate_candidates import best_candidate

    a, b = {"successes": 5, "probe": {"optimal_accuracy": 0.7}}, {"successes": 5, "probe": {"optimal_accuracy": 0.8}}
    assert best_candidate([a, b]) is b and best_candidate([{"successes": 6}, b])["successes"] == 6
    first, second = {"successes": 2}, {"successes": 2}
    assert best_candidate([first, second]) is first
