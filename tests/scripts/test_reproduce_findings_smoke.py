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
import tarfile
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
def test_validation_sweep_runs_each_ppo_setting_on_the_validation_cities(tmp_path):
    """scripts/gpu/findings_sweep.sh: PPO settings (lr:temperature[:lr_steps]) side by side, each a reproduce_findings.sh
    with VALIDATION=1 VIRL_ARMS=ppo over inputs built once (DATA_DIR, STAGE=inputs): no SFT data, every
    evaluation on the validation cities (metro 9, hillside 10), and one table row per setting and the init."""
    sweep, out = tmp_path / "sweep", tmp_path / "out"
    timeline = rehearse("findings_sweep.sh", out, {"STAGE": "all", "SWEEP": str(sweep), "SETTINGS": "1e-5:0.2 3e-5:0.7:60"},
                        drop=("TRAIN_MIN", "EVAL_VIRL", "IN_EVAL", "INIT_VIRL", "PPO_SHUFFLE", "TOKEN_ARM", "DATA_DIR",
                              "VALIDATION", "VIRL_ARMS", "PPO_LR", "PPO_TEMP", "PPO_LR_STEPS", "SEEDS", "ARMS"), timeout=900)
    assert "sweep table written" in timeline and "FAILED" not in timeline, timeline
    inputs = (sweep / "out" / "inputs" / "timeline.txt").read_text()
    assert "city city-val built (metro, seed 9" in inputs and "city city-val-hillside built (hillside, seed 10" in inputs
    assert not (sweep / "data" / "virl-sft-more").exists() and not (sweep / "data" / "city-eval").exists()
    for name, lr, temp, steps in (("lr1e-5-t0.2", 1e-5, 0.2, 20), ("lr3e-5-t0.7-s60", 3e-5, 0.7, 60)):
        work = sweep / name
        assert "] city " not in (sweep / "out" / name / "timeline.txt").read_text()  # the shared inputs
        config = json.loads((work / "runs" / "ppo-s0" / "config.json").read_text())
        assert config["sampling"]["temperature"] == temp and config["optim"]["lr"] == lr
        assert config["lr_max_steps"] == steps  # the third field, the recipe's 20 when left out
        assert Path(config["eval"]["data"]).name == "city-val"
        assert Path(config["eval"]["options"]["visual_data"]).name == "city-val-hillside"
        for label in ("ppo-s0", "sft-init"):
            run = json.dumps(json.loads((work / "eval" / label / "run.json").read_text()))
            assert "city-val" in run and "city-eval" not in run, (name, label)
        doc = json.loads((sweep / "out" / name / "findings.json").read_text())
        assert {r["arm"] for r in doc["rows"]} == {"ppo"}
        spec = (work / "findings" / "findings.yaml").read_text()
        assert "evaluated on VALIDATION cities (metro 9, hillside 10)" in spec and "sft-more" not in spec, spec
    table = (out / "sweep.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| lr ") or line.startswith("| SFT init")]
    assert [r.split("|")[1].strip() for r in rows] == ["lr 1e-5, T 0.2", "lr 3e-5, T 0.7, cosine over 60 updates",
                                                       "SFT init (no PPO)"], table
    assert all("not evaluated" not in r and "[" in r for r in rows[:2]), table
    with tarfile.open(out / "sweep.tar.gz") as tar:  # each setting's runs, evals and findings (init included)
        names = set(tar.getnames())
    for name in ("lr1e-5-t0.2", "lr3e-5-t0.7-s60"):
        for member in ("runs/ppo-s0/metrics.jsonl", "eval/sft-init/metrics.json", "findings/findings-init.json",
                       "findings.json", "timeline.txt"):
            assert f"./{name}/{member}" in names, (name, member, sorted(names))
