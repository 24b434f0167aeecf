"""The findings job (issue 20), rehearsed on CPU: the TVR group (SMOKE=1 ARMS=tvr) and the V-IRL group
across commands (a budget longer than one command pauses and resumes).

scripts/gpu/reproduce_findings.sh trains, per seed, grpo-multi, grpo-single, grpo-anchored (grpo-multi +
pose-anchored step credit) and cot-sft (VA-SFT + continued SFT on CoT expert trajectories) at one time
budget, evaluates them and the two SFT inits on the bench's eval split, and writes findings.json through
`spatialrl findings collect`. The rehearsal runs all of it on a tiny bench with two seeds; this checks
the rows it produced, not just the exit status.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .rehearsal import rehearse

TVR_ARMS = {  # spec label → the script's arm (run folders runs/<arm>-s<seed>)
    "va-sft-grpo-multi": "grpo-multi",
    "ao-sft-grpo-single": "grpo-single",
    "va-sft-grpo-anchored": "grpo-anchored",
    "va-sft-cot-sft": "cot-sft",
}
SEEDS = "0"  # one seed: the rehearsal's CPU time is about proportional to the runs (2 seeds: 13 min under load)


def rows_by_key(rows: list[dict]) -> dict[tuple[str, str, str], dict]:
    out: dict[tuple[str, str, str], dict] = {}
    for r in rows:
        key = (r["arm"], str(r["seed"]), r["split"])
        assert key not in out, f"two rows for {key}"
        out[key] = r
    return out


@pytest.mark.slow
def test_tvr_findings_rehearsal_has_a_row_per_arm_seed_and_category(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    timeline = rehearse("reproduce_findings.sh", out, {"ARMS": "tvr", "STAGE": "all", "SEEDS": SEEDS, "WORK": str(work)},
                        drop=("TVR_BENCH", "INIT_VA", "INIT_AO", "TRAIN_MIN", "EVAL_TVR", "IN_EVAL_TVR", "COT_EPISODES",
                              "COT_TOKENS", "SEED_PARALLEL"), timeout=1500)
    check_outputs(out, work, set(SEEDS.split()), timeline)


def check_outputs(out: Path, work: Path, seeds: set[str], timeline: str) -> None:
    assert "findings written" in timeline and "FAILED" not in timeline, timeline
    assert (out / "table.md").is_file() and (out / "curve-tvr-overall.png").is_file()

    # the trained arms: one row per (arm, seed, category) and the overall, with the compute fields
    doc = json.loads((out / "findings.json").read_text())
    rows = rows_by_key([r for r in doc["rows"] if r["experiment"] == "tvr-sft-grpo"])
    assert {a for a, _, _ in rows} == set(TVR_ARMS), sorted(rows)
    splits = {s for _, _, s in rows}
    assert "overall" in splits and len(splits) >= 2, splits  # the eval split's categories + overall
    for arm in TVR_ARMS:
        for seed in seeds:
            for split in splits:
                r = rows.get((arm, seed, split))
                assert r is not None, f"no row for {arm} seed {seed} {split}"
                assert r["episodes"] > 0 and 0.0 <= r["success"] <= 1.0, r
                assert r["gpu_seconds"] is not None and r["gpu_seconds"] > 0, r
                assert r["samples"] is not None and r["samples"] > 0, r
                assert r["train_run"] and r["train_run"].endswith(f"{TVR_ARMS[arm]}-s{seed}"), r
    assert rows[("va-sft-cot-sft", "0", "overall")]["samples_kind"] == "expert_samples"
    assert rows[("va-sft-grpo-anchored", "0", "overall")]["samples_kind"] == "env_steps"
    summary = {(s["arm"], s["split"]) for s in doc["summary"] if s["experiment"] == "tvr-sft-grpo"}
    assert summary == {(a, s) for a in TVR_ARMS for s in splits}

    # the inits: one greedy evaluation each, no training run
    inits = rows_by_key(json.loads((work / "findings" / "findings-init.json").read_text())["rows"])
    assert {(a, s) for a, s, _ in inits} == {("va-sft", "0"), ("ao-sft", "0")}
    for r in inits.values():
        assert r["episodes"] > 0 and 0.0 <= r["success"] <= 1.0, r
        assert r["gpu_seconds"] is None and "samples" in r

    # the two new arms are what they claim: grpo-anchored = grpo-multi + pose_anchored; cot-sft uses CoT
    for seed in sorted(seeds):
        multi = json.loads((work / "runs" / f"grpo-multi-s{seed}" / "config.json").read_text())
        anchored = json.loads((work / "runs" / f"grpo-anchored-s{seed}" / "config.json").read_text())
        assert multi["pose_anchored"] is False and anchored["pose_anchored"] is True
        diff = {k for k in multi if k not in ("pose_anchored", "output_dir") and multi[k] != anchored.get(k)}
        assert not diff, f"grpo-anchored differs from grpo-multi in {sorted(diff)}"
        cot_run = json.loads((work / "runs" / f"cot-sft-s{seed}" / "config.json").read_text())
        assert Path(cot_run["data"]["train"]).name == "tvr-cot-sft"
        assert cot_run["eval"]["options"]["cot"] is True
    meta = json.loads((work / "data" / "tvr-cot-sft" / "meta.json").read_text())
    assert meta["cot"] is True and meta["options"]["memory"] == "va" and meta["options"]["split"] == "sft"
    eval_run = (work / "eval" / "cot-sft-s0" / "run.json").read_text()
    assert '"cot": true' in eval_run, eval_run[:2000]


def run_stage(work: Path, out: Path, **env_over: str) -> str:
    """One command of the V-IRL group's rehearsal; returns its timeline."""
    return rehearse("reproduce_findings.sh", out, {"ARMS": "virl", "SEEDS": "0", "WORK": str(work), **env_over},
                    drop=("INIT_VIRL", "EVAL_VIRL", "IN_EVAL", "SEED_PARALLEL", "PPO_SHUFFLE", "TOKEN_ARM", "END_S", "TRAIN_MIN",
                          "TRAIN_END_S", "PAUSE_S", "PPO_TEMP", "PPO_LR", "VIRL_ARMS", "VALIDATION", "DATA_DIR"))


ARMS = ("ppo", "sft-more", "ppo-token")


@pytest.mark.slow
def test_virl_budget_longer_than_a_command_pauses_and_resumes(tmp_path):
    """TRAIN_MIN beyond the command: the runs get SIGTERM PAUSE_S before TRAIN_END_S, save a checkpoint and
    pause; the next STAGE=train resumes them (not from scratch) to the budget; STAGE=eval then writes the
    success and per-step-accuracy experiments with one row per arm, seed and split. TOKEN_ARM adds
    ppo-token, the same PPO run with the per-token ratio."""
    work = tmp_path / "work"
    # SIGTERM ~40 s into training (inputs take ~10 s): after the first PPO update and SFT step, before 1.2 min
    knobs = {"TRAIN_MIN": "1.2", "PPO_SHUFFLE": "episodes", "TOKEN_ARM": "1"}
    first = run_stage(work, tmp_path / "out1", STAGE="train", TRAIN_END_S="100", PAUSE_S="50", **knobs)
    assert all(f"paused {a}-s0" in first for a in ARMS), first
    second = run_stage(work, tmp_path / "out2", STAGE="train", **knobs)
    assert all(f"trained {a}-s0" in second for a in ARMS) and "FAILED" not in second, second
    log = (work / "logs" / "train-ppo-s0.log").read_text()
    resumed = [int(m) for m in re.findall(r"setup/resumed_from_update=(\d+)", log)]
    assert resumed[0] == 0 and resumed[-1] > 0, resumed  # the second process continued the first's updates
    config = json.loads((work / "runs" / "ppo-s0" / "config.json").read_text())
    assert config["shuffle"] == "episodes" and config["time_budget_minutes"] == 1.2
    token = json.loads((work / "runs" / "ppo-token-s0" / "config.json").read_text())
    assert config["ratio"] == "sequence" and token["ratio"] == "token"
    assert {k for k in config if k not in ("ratio", "output_dir") and config[k] != token.get(k)} == set()

    final = run_stage(work, tmp_path / "out3", STAGE="eval", TOKEN_ARM="1")
    assert "findings written" in final and "FAILED" not in final, final
    rows = json.loads((tmp_path / "out3" / "findings.json").read_text())["rows"]
    for experiment in ("virl-sft-vs-ppo", "virl-sft-vs-ppo-per-step"):
        got = rows_by_key([r for r in rows if r["experiment"] == experiment])
        assert set(got) == {(a, "0", s) for a in ARMS for s in ("in-dist", "rule-ood", "visual-ood")}
        for r in got.values():
            assert r["episodes"] > 0 and 0.0 <= r["value"] <= 1.0 and r["gpu_seconds"] > 0, r


@pytest.mark.slow
def test_virl_validation_sweep_setting_evaluates_on_the_validation_cities_only(tmp_path):
    """VALIDATION=1 VIRL_ARMS=ppo: one setting of a PPO sweep over inputs shared through DATA_DIR (built by
    STAGE=inputs): no SFT data, the validation cities (metro 9, hillside 10) for every evaluation, PPO at the
    given temperature and lr, and findings rows of the PPO arm only, marked validation."""
    data = tmp_path / "data"
    knobs = {"VALIDATION": "1", "VIRL_ARMS": "ppo", "DATA_DIR": str(data)}
    first = run_stage(tmp_path / "inputs", tmp_path / "out1", STAGE="inputs", **knobs)
    assert "city city-val built (metro, seed 9" in first and "city city-val-hillside built (hillside, seed 10" in first
    assert "data sft-more" not in first and not (data / "virl-sft-more").exists() and "FAILED" not in first
    assert not (data / "city-eval").exists()
    work = tmp_path / "work"
    final = run_stage(work, tmp_path / "out2", STAGE="all", PPO_TEMP="0.7", PPO_LR="3e-5", **knobs)
    assert "findings written" in final and "FAILED" not in final and "] city " not in final, final  # shared inputs
    config = json.loads((work / "runs" / "ppo-s0" / "config.json").read_text())
    assert config["sampling"]["temperature"] == 0.7 and config["optim"]["lr"] == 3e-5
    assert Path(config["eval"]["data"]).name == "city-val"
    assert Path(config["eval"]["options"]["visual_data"]).name == "city-val-hillside"
    for label in ("ppo-s0", "sft-init"):
        run = json.loads((work / "eval" / label / "run.json").read_text())
        assert "city-val" in json.dumps(run) and "city-eval" not in json.dumps(run), label
    doc = json.loads((tmp_path / "out2" / "findings.json").read_text())
    assert {r["arm"] for r in doc["rows"]} == {"ppo"}
    spec = (work / "findings" / "findings.yaml").read_text()
    assert "evaluated on VALIDATION cities (metro 9, hillside 10)" in spec and "sft-more" not in spec, spec
