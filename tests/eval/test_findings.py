"""`spatialrl findings`: the hierarchical bootstrap on real-format episode files with known success
patterns, the compute read from training logs, and the commands end to end on real run folders (the
expert, random and a tiny SFT model evaluated by `spatialrl eval` on a small TVR bench and V-IRL city)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from spatialrl.cli import app
from spatialrl.errors import DataError
from spatialrl.eval.findings import collect, findings_table, hierarchical_bootstrap, load_spec, train_timeline
from spatialrl.io import read_jsonl

TVR_SIZES = {"eval": 4, "sft": 4, "rl": 0, "diag_rotate": 0, "diag_move": 0}
TVR_SCENES = {"sft": 1, "eval": 1, "rl": 0}
SMALL_TVR = ["--set", "width=112", "--set", "height=64", "--set", "memory=ao"]
SHORT = ["--set", "max_steps_single=2", "--set", "max_steps_multi=2"]  # the tiny model's evals: 2 turns (CPU time)


# ------------------------------------------------------------------------------------------ helpers
def write_eval_run(folder: Path, outcomes: dict[str, list[bool]], task: str = "tvr") -> Path:
    """An eval run folder in the format `spatialrl eval` writes (run.json, episodes.jsonl rows with the
    runner's fields), with the given success per episode."""
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"task": task, "agent": "synthetic", "options": {}, "label": "s"}))
    with (folder / "episodes.jsonl").open("w") as f:
        for cat, wins in outcomes.items():
            for i, win in enumerate(wins):
                f.write(json.dumps({"episode_id": f"{cat}-{i:04d}", "category": cat, "agent": "synthetic",
                                    "n_steps": 3, "return": float(win), "response_tokens": 0, "error": None,
                                    "success": bool(win)}) + "\n")
    return folder


def write_spec(path: Path, arms: dict[str, dict[str, dict]], overall: bool = False, min_episodes: int = 0,
               **top) -> Path:
    """A findings spec with one experiment ``exp`` of ``arms``: {arm: {seed: {train?, eval}}}."""
    spec = {**top, "experiments": {"exp": {"overall": overall, "min_episodes": min_episodes,
                                           "arms": {a: {"seeds": s} for a, s in arms.items()}}}}
    path.write_text(yaml.safe_dump(spec))
    return path


def synthetic_arm(root: Path, rates: list[float], n: int, rng: np.random.Generator) -> dict[str, dict]:
    """One seed folder per rate, ``n`` episodes each, success ~ Bernoulli(rate)."""
    return {str(s): {"eval": str(write_eval_run(root / f"seed{s}", {"in-dist": list(rng.random(n) < p)}))}
            for s, p in enumerate(rates)}


def summary_of(doc: dict, arm: str = "a", split: str = "in-dist") -> dict:
    return next(s for s in doc["summary"] if s["arm"] == arm and s["split"] == split)


def coverage(tmp_path: Path, n_sets: int, seeds: int, episodes: int, spread: float, rate: float = 0.6):
    """Share of ``n_sets`` simulated datasets whose 95% CI holds ``rate``, and the mean CI width. Seed
    rates are ``rate`` + N(0, spread) (clipped): the population mean over seeds is ``rate`` (almost
    exactly, the clipping is rare at these values)."""
    rng = np.random.default_rng(123)
    hits, widths = 0, []
    for k in range(n_sets):
        rates = np.clip(rate + rng.normal(0, spread, seeds), 0, 1) if spread else [rate] * seeds
        spec = write_spec(tmp_path / f"spec{k}.yaml", {"a": synthetic_arm(tmp_path / f"set{k}", list(rates), episodes, rng)},
                          bootstrap={"resamples": 1000, "seed": k, "level": 0.95})
        s = summary_of(collect(load_spec(spec)))
        hits += s["ci_low"] <= rate <= s["ci_high"]
        widths.append(s["ci_high"] - s["ci_low"])
    return hits / n_sets, float(np.mean(widths))


# ------------------------------------------------------------------------------------------ bootstrap
def test_ci_holds_the_true_rate_at_the_nominal_frequency(tmp_path):
    """200 datasets, 3 seeds × 100 episodes at a common rate 0.6: the 95% CI holds it in >= 90% of them,
    and is not uselessly wide (a [0, 1] interval would also 'cover')."""
    hit, width = coverage(tmp_path, 200, seeds=3, episodes=100, spread=0.0)
    assert hit >= 0.90, hit
    assert width < 0.2, width  # a binomial 95% CI of 300 episodes is ±0.055; the seed level adds to it


def test_ci_coverage_with_real_between_seed_differences(tmp_path):
    """Seeds that truly differ (sd 0.1 around 0.6) and 10 seeds: still >= 90% over 200 datasets. (With 3
    such seeds a percentile bootstrap over seeds covers less: docs/evaluation.md gives the measured rate.)"""
    hit, _ = coverage(tmp_path, 200, seeds=10, episodes=50, spread=0.1)
    assert hit >= 0.90, hit


def test_ci_narrows_with_more_episodes_and_widens_with_seed_variance(tmp_path):
    def ci(name: str, pattern: list[list[bool]]) -> dict:
        seeds = {str(s): {"eval": str(write_eval_run(tmp_path / name / str(s), {"in-dist": wins}))}
                 for s, wins in enumerate(pattern)}
        return summary_of(collect(load_spec(write_spec(tmp_path / f"{name}.yaml", {"a": seeds}))))

    def exact(rate: float, n: int) -> list[bool]:  # exactly rate·n successes
        return [i < round(rate * n) for i in range(n)]

    few = ci("few", [exact(0.5, 40)] * 3)
    many = ci("many", [exact(0.5, 640)] * 3)
    spread = ci("spread", [exact(0.2, 40), exact(0.5, 40), exact(0.8, 40)])
    assert few["mean"] == many["mean"] == spread["mean"] == pytest.approx(0.5)
    assert many["ci_high"] - many["ci_low"] < 0.5 * (few["ci_high"] - few["ci_low"])  # 16× episodes ≈ ¼ width
    assert spread["ci_high"] - spread["ci_low"] > 1.5 * (few["ci_high"] - few["ci_low"])
    assert (few["seeds"], few["episodes"]) == (3, 120)


def test_overall_pools_a_seeds_categories(tmp_path):
    seeds = {str(s): {"eval": str(write_eval_run(tmp_path / str(s), {"single-easy": [True, True, False, True],
                                                                     "multi-hard": [False, True]}))}
             for s in range(3)}
    doc = collect(load_spec(write_spec(tmp_path / "o.yaml", {"a": seeds}, overall=True)))
    overall = [r for r in doc["rows"] if r["split"] == "overall"]
    assert len(overall) == 3 and all(r["episodes"] == 6 and r["success"] == pytest.approx(4 / 6) for r in overall)
    assert summary_of(doc, "a", "overall")["episodes"] == 18
    assert findings_table(doc).splitlines()[2].endswith("| multi-hard | single-easy | overall | GPU-s / seed | samples / seed |")


def test_table_states_how_closely_the_trained_arms_compute_matches():
    def item(arm: str, gpu: float | None, samples: float | None) -> dict:
        return {"experiment": "e", "arm": arm, "label": arm.upper(), "split": "in-dist", "metric": "success",
                "mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "seeds": 3, "episodes": 600,
                "gpu_seconds_mean": gpu, "samples_mean": samples}

    doc = {"format": "spatialrl-findings/1", "bootstrap": {"level": 0.95},
           "summary": [item("init", None, None), item("sft", 1000.0, 4096.0), item("ppo", 1200.0, 4096.0)]}
    text = findings_table(doc)
    assert "| SFT | 50.0 [40.0, 60.0] (3 seeds, 600 episodes) | 1000 | 4096 |" in text
    assert ("Training compute across trained arms: GPU-seconds per seed 1000 (SFT) to 1200 (PPO), ×1.20; "
            "samples per seed equal (4096).") in text
    with pytest.raises(DataError, match="--experiment 'x': not in the findings file"):
        findings_table(doc, experiment="x")


def test_bootstrap_is_deterministic_by_seed_and_handles_unequal_counts():
    groups = [np.array([1, 0, 1, 1]), np.array([0, 0, 1]), np.array([1] * 9 + [0])]
    a = hierarchical_bootstrap(groups, 2000, 0.95, seed=7)
    assert a == hierarchical_bootstrap(groups, 2000, 0.95, seed=7)
    assert a != hierarchical_bootstrap(groups, 2000, 0.95, seed=8)
    assert a[0] == pytest.approx(np.mean([0.75, 1 / 3, 0.9]))  # the mean of the seeds' rates
    assert 0 <= a[1] < a[0] < a[2] <= 1
    # a constant outcome has a zero-width interval: nothing to resample
    assert hierarchical_bootstrap([np.ones(5), np.ones(2), np.ones(3)], 500) == (1.0, 1.0, 1.0)


# ------------------------------------------------------------------------------------------ spec checks
def test_fewer_than_three_seeds_and_bad_fields_are_refused_with_file_and_field(tmp_path):
    rng = np.random.default_rng(0)
    two = write_spec(tmp_path / "two.yaml", {"a": synthetic_arm(tmp_path / "two", [0.5, 0.5], 10, rng)})
    with pytest.raises(DataError, match=r"two\.yaml: experiments\.exp\.arms\.a\.seeds: 2 seed\(s\)"):
        load_spec(two)
    assert len(collect(load_spec(two, allow_fewer_seeds=True))["rows"]) == 2
    result = CliRunner().invoke(app, ["findings", "collect", "--spec", str(two), "--out", str(tmp_path / "f.json")])
    assert result.exit_code == 2 and "experiments.exp.arms.a.seeds" in result.output

    seeds = synthetic_arm(tmp_path / "three", [0.5] * 3, 10, rng)
    small = write_spec(tmp_path / "small.yaml", {"a": seeds}, min_episodes=11)
    with pytest.raises(DataError, match=r"small\.yaml: experiments\.exp\.arms\.a\.seeds\.0\.eval: 10 finished "
                                        r"episode\(s\) of 'in-dist' .* below experiments\.exp\.min_episodes 11"):
        collect(load_spec(small))
    assert len(collect(load_spec(small), allow_fewer_episodes=True)["rows"]) == 3
    seeds["2"]["eval"] = str(tmp_path)  # not a run folder
    with pytest.raises(DataError, match=r"bad\.yaml: experiments\.exp\.arms\.a\.seeds\.2\.eval: .* not an eval run"):
        collect(load_spec(write_spec(tmp_path / "bad.yaml", {"a": seeds})))
    seeds["2"]["eval"] = [seeds["0"]["eval"], seeds["1"]["eval"]]  # in-dist twice for one seed
    with pytest.raises(DataError, match=r"seeds\.2\.eval: split 'in-dist' is in both"):
        collect(load_spec(write_spec(tmp_path / "twice.yaml", {"a": seeds})))
    with pytest.raises(DataError, match=r"typo\.yaml: experiments\.exp\.arms\.a\.seeds\.0: unknown field\(s\) \['evals'\]"):
        load_spec(write_spec(tmp_path / "typo.yaml", {"a": {str(s): {"evals": "x"} | {"eval": "x"} for s in range(3)}}))


def test_training_time_chains_resumes_and_leaves_eval_time_out(tmp_path):
    """A hand-written metrics.jsonl in the trainers' format: a PPO run on 2 processes, killed after update
    2 and resumed from its checkpoint at 1 (update 2 ran twice), closed-loop eval after updates 2 and 3."""
    run = tmp_path / "ppo"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"num_steps": 8, "task": {"name": "tvr"}}))
    records = [
        {"step": 0, "time": 0.0, "setup/processes": 2},
        {"step": 1, "time": 10.0, "train/lr": 1.0, "charts/env_steps": 16},
        {"step": 2, "time": 20.0, "train/lr": 1.0, "charts/env_steps": 32},
        {"step": 2, "time": 50.0, "eval/visual-ood/success_rate": 0.25},  # 30 s of eval
        {"step": 1, "time": 0.0, "setup/processes": 2},  # resumed: the clock restarts
        {"step": 2, "time": 12.0, "train/lr": 1.0, "charts/env_steps": 32},
        {"step": 2, "time": 30.0, "eval/visual-ood/success_rate": 0.3},  # the redone update's eval, 18 s
        {"step": 3, "time": 40.0, "train/lr": 1.0, "charts/env_steps": 48},
        {"step": 3, "time": 80.0, "eval/visual-ood/success_rate": 0.5},  # 40 s of eval + final save
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    tl = train_timeline(run)
    assert tl.train_seconds == pytest.approx([0, 10, 20, 20, 20, 32, 32, 42, 42])
    assert tl.samples == [0, 16, 32, 32, 16, 32, 32, 48, 48] and tl.processes == 2 and tl.trainer == "ppo"
    assert any("resumed 1 time" in n for n in tl.notes)
    from spatialrl.eval.findings import Arm, SeedRuns, arm_curve, train_compute

    compute = train_compute(run)
    assert (compute["train_seconds"], compute["gpu_seconds"], compute["samples"]) == (42, 84, 48)
    assert compute["samples_kind"] == "env_steps"
    # the curve: the redone update's eval replaces the first one; no eval folders, so a band over seeds
    arm = Arm("ppo", "PPO", [SeedRuns(str(k), run, [], f"seeds.{k}") for k in range(3)])
    boot = {"resamples": 200, "level": 0.95, "seed": 0}
    curve = arm_curve(arm, "eval/visual-ood/success_rate", "gpu_seconds", boot)
    assert curve == {"x": [64.0, 84.0], "mean": [0.3, 0.5], "low": [0.3, 0.5], "high": [0.3, 0.5],
                     "seeds": [3.0, 3.0], "band": ["seeds", "seeds"]}
    assert arm_curve(arm, "eval/visual-ood/success_rate", "samples", boot)["x"] == [32.0, 48.0]


# ------------------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def tvr_world(tmp_path_factory):
    """A small TVR bench, an AO SFT dataset from its `sft` split, the tiny built-in model and three tiny
    SFT runs (seeds 0-2, closed-loop eval on 2 `eval` episodes after each update)."""
    from spatialrl.envs.registry import get_suite
    from spatialrl.envs.tvr.bench import BenchConfig, make_bench
    from spatialrl.models.builtin import init_model
    from spatialrl.train.common import reset_accelerate_state
    from spatialrl.train.config import SFTConfig, load_config
    from spatialrl.train.data import build_sft_dataset
    from spatialrl.train.sft import train

    root = tmp_path_factory.mktemp("findings")
    bench = root / "bench"
    make_bench(bench, BenchConfig.preset(seed=11, sizes=TVR_SIZES, scenes=TVR_SCENES), progress=False)
    options = {**get_suite("tvr").default_options, "data": str(bench), "split": "sft", "width": 112, "height": 64,
               "memory": "ao", "cache_mb": 16}
    build_sft_dataset(get_suite("tvr"), options, root / "sft_data", progress=False)
    init_model("tiny", root / "tiny", seed=0)
    for seed in range(3):
        cfg = {"output_dir": str(root / f"sft-s{seed}"), "seed": seed, "data.train": str(root / "sft_data"),
               "model.path": str(root / "tiny"), "max_steps": 2, "per_device_batch_size": 2, "grad_accum": 1,
               "logging.every": 1, "logging.report_to": "none", "checkpoint.resume": "never",
               "eval.task": "tvr", "eval.data": str(bench), "eval.split": "eval", "eval.every": 1,
               "eval.episodes": 2, "eval.max_new_tokens": 8,
               "eval.options": {"width": 112, "height": 64, "memory": "ao", "max_steps_single": 2,
                                "max_steps_multi": 2}}
        train(load_config(SFTConfig, None, cfg))
        reset_accelerate_state()
    return root


def run_eval(out: Path, *args: str) -> Path:
    result = CliRunner().invoke(app, ["eval", "--out", str(out), "--no-report", *args])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow  # trains three tiny SFT models (about a minute on CPU, shared by both tests)
def test_collect_table_and_curves_on_real_tvr_runs(tvr_world, tmp_path):
    root = tvr_world
    bench = str(root / "bench")
    arms: dict[str, dict[str, dict]] = {"expert": {}, "random": {}, "sft": {}}
    for seed in range(3):
        common = ["--task", "tvr", "--data", bench, "--split", "eval", "--seed", str(seed), *SMALL_TVR]
        for agent in ("expert", "random"):
            arms[agent][str(seed)] = {"eval": str(run_eval(tmp_path / f"{agent}-s{seed}", "--agent", agent, *common))}
        model = run_eval(tmp_path / f"sft-s{seed}", "--agent", f"hf:{root / f'sft-s{seed}' / 'final'}",
                         "--max-new-tokens", "8", *common, *SHORT)
        arms["sft"][str(seed)] = {"train": str(root / f"sft-s{seed}"), "eval": str(model)}
    spec = write_spec(tmp_path / "spec.yaml", arms, bootstrap={"resamples": 2000, "seed": 3})
    out = tmp_path / "out" / "findings.json"
    result = CliRunner().invoke(app, ["findings", "collect", "--spec", str(spec), "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())

    # every row agrees with the eval run's own metrics.json, per category
    categories = {r["category"] for r in read_jsonl(tmp_path / "expert-s0" / "episodes.jsonl")}
    assert len(doc["rows"]) == 3 * 3 * len(categories)
    for row in doc["rows"]:
        metrics = json.loads((tmp_path / row["eval_run"] / "metrics.json").read_text())[row["split"]]
        assert row["success"] == pytest.approx(metrics["success_rate"]) and row["episodes"] == len(row["outcomes"])
        assert row["eval_run"] == f"{row['arm']}-s{row['seed']}"  # relative to the spec's root (its folder)
    assert all(r["success"] == 1.0 for r in doc["rows"] if r["arm"] == "expert")

    # compute: from the SFT runs' own logs (2 updates × 2 samples × 1 process), eval time left out
    for row in (r for r in doc["rows"] if r["arm"] == "sft"):
        summary = json.loads((tmp_path / row["train_run"] / "summary.json").read_text())
        assert row["trainer"] == "sft" and row["samples"] == 4 and row["samples_kind"] == "expert_samples"
        assert row["processes"] == 1 and 0 < row["gpu_seconds"] == row["train_seconds"] < summary["seconds"]
        assert row["unseen_check"].startswith("passed: none of 4 eval episodes")
    assert all(r["gpu_seconds"] is None and r["compute_notes"] for r in doc["rows"] if r["arm"] != "sft")

    expert = summary_of(doc, "expert", sorted(categories)[0])
    assert (expert["mean"], expert["ci_low"], expert["ci_high"], expert["seeds"]) == (1.0, 1.0, 1.0, 3)
    again = tmp_path / "again.json"
    assert CliRunner().invoke(app, ["findings", "collect", "--spec", str(spec), "--out", str(again)]).exit_code == 0
    assert json.loads(again.read_text())["summary"] == doc["summary"]  # deterministic by the bootstrap seed

    table = CliRunner().invoke(app, ["findings", "table", "--findings", str(out), "--out", str(tmp_path / "t.md")])
    assert table.exit_code == 0, table.output
    text = (tmp_path / "t.md").read_text()
    assert "| expert | 100.0 [100.0, 100.0] (3 seeds, " in text and text.count("\n| ") == 4  # header + 3 arms
    assert findings_table(doc) == text

    key = f"eval/{sorted(categories)[0]}/success_rate"
    for x in ("gpu_seconds", "samples"):
        png = tmp_path / f"curve-{x}.png"
        result = CliRunner().invoke(app, ["findings", "curves", "--spec", str(spec), "--key", key, "--x", x,
                                          "--out", str(png)])
        assert result.exit_code == 0, result.output
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from spatialrl.eval.findings import arm_curve

    sft_arm, boot = load_spec(spec).experiments[0].arms[2], {"resamples": 200, "level": 0.95, "seed": 0}
    curve = arm_curve(sft_arm, key, "samples", boot)
    assert curve is not None and curve["x"] == [2.0, 4.0] and curve["seeds"] == [3.0, 3.0]  # after updates 1, 2
    # the trainers keep each closed-loop eval's folder: the band is over seeds and episodes, and the mean
    # is the logged success rate's
    assert curve["band"] == ["seeds+episodes"] * 2
    logged = [np.mean([r[key] for r in read_jsonl(root / f"sft-s{s}" / "metrics.jsonl") if r["step"] == step and key in r])
              for step in (1, 2) for s in range(3)]
    assert curve["mean"] == pytest.approx([np.mean(logged[:3]), np.mean(logged[3:])])
    assert arm_curve(sft_arm, "train/loss", "samples", boot)["band"] == ["seeds", "seeds"]  # no episodes behind it
    missing = CliRunner().invoke(app, ["findings", "curves", "--spec", str(spec), "--key", "eval/nope/x",
                                       "--out", str(tmp_path / "n.png")])
    assert missing.exit_code == 2 and "no training run logs 'eval/nope/x'" in " ".join(missing.output.split())


@pytest.mark.slow  # trains three tiny SFT models (about a minute on CPU, shared by both tests)
def test_eval_on_training_episodes_is_refused(tvr_world, tmp_path):
    """The SFT data came from the bench's `sft` split: an eval run on that split is refused, naming the
    spec file and field."""
    root = tvr_world
    seeds = {}
    for seed in range(3):
        ev = run_eval(tmp_path / f"random-sft-s{seed}", "--task", "tvr", "--agent", "random", "--data",
                      str(root / "bench"), "--split", "sft", "--seed", str(seed), *SMALL_TVR, *SHORT)
        seeds[str(seed)] = {"train": str(root / f"sft-s{seed}"), "eval": str(ev)}
    spec = write_spec(tmp_path / "leak.yaml", {"sft": seeds})
    result = CliRunner().invoke(app, ["findings", "collect", "--spec", str(spec), "--out", str(tmp_path / "f.json")])
    assert result.exit_code == 2
    assert "leak.yaml: experiments.exp.arms.sft.seeds.0.eval:" in " ".join(result.output.split())
    assert "learnt from" in result.output
    assert collect(load_spec(spec), check_overlap=False)["rows"][0]["unseen_check"].startswith("not checked")

    # a training run whose SFT data is not on this machine: not refused, and the rows say it was not checked
    moved = tmp_path / "moved-sft"
    moved.mkdir()
    config = json.loads((root / "sft-s0" / "config.json").read_text())
    config["data"]["train"] = str(tmp_path / "elsewhere")
    (moved / "config.json").write_text(json.dumps(config))
    (moved / "metrics.jsonl").write_bytes((root / "sft-s0" / "metrics.jsonl").read_bytes())
    seeds["0"]["train"] = str(moved)
    spec = write_spec(tmp_path / "moved.yaml", {"sft": seeds})
    result = CliRunner().invoke(app, ["findings", "collect", "--spec", str(spec), "--out", str(tmp_path / "g.json")])
    assert result.exit_code == 2 and "seeds.1.eval" in " ".join(result.output.split())  # seeds 1, 2 still leak
    seeds["1"]["train"] = seeds["2"]["train"] = str(moved)
    doc = collect(load_spec(write_spec(tmp_path / "moved.yaml", {"sft": seeds})))
    assert {r["unseen_check"] for r in doc["rows"]} == {f"not checked: SFT data {tmp_path / 'elsewhere'} not found: "
                                                        "training episodes unknown"}


def test_collect_on_real_virl_runs_per_split(tmp_path):
    from spatialrl.envs.virl.testdata import random_routes, write_dataset

    city = write_dataset(tmp_path / "city", random_routes(6, seed=3), seed=1)
    arms: dict[str, dict[str, dict]] = {"expert": {}, "random": {}}
    for seed in range(3):
        for agent in arms:
            ev = run_eval(tmp_path / f"{agent}-s{seed}", "--task", "virl", "--agent", agent, "--data", str(city),
                          "--split", "in-dist,rule-ood", "--seed", str(seed), "--set", "episodes=4",
                          "--set", "grid_size=112")
            arms[agent][str(seed)] = {"eval": str(ev)}
    doc = collect(load_spec(write_spec(tmp_path / "virl.yaml", arms)))
    assert {(r["arm"], r["split"]) for r in doc["rows"]} == {(a, s) for a in arms for s in ("in-dist", "rule-ood")}
    for row in doc["rows"]:
        metrics = json.loads((tmp_path / row["eval_run"] / "metrics.json").read_text())[row["split"]]
        assert row["episodes"] == 4 and row["success"] == pytest.approx(metrics["success_rate"])
    assert summary_of(doc, "expert", "rule-ood")["mean"] == 1.0
    assert {s["episodes"] for s in doc["summary"]} == {12}

    # the paper's rule-OOD metric: per-step accuracy, a value under its own name and no `success` field
    spec = yaml.safe_load((tmp_path / "virl.yaml").read_text())
    spec["experiments"]["exp"]["metric"] = "per_step_accuracy"
    (tmp_path / "per-step.yaml").write_text(yaml.safe_dump(spec))
    doc = collect(load_spec(tmp_path / "per-step.yaml"))
    for row in doc["rows"]:
        metrics = json.loads((tmp_path / row["eval_run"] / "metrics.json").read_text())[row["split"]]
        episodes = [json.loads(line) for line in (tmp_path / row["eval_run"] / "episodes.jsonl").open()]
        mine = [e["per_step_accuracy"] for e in episodes if e["split"] == row["split"]]
        assert row["metric"] == "per_step_accuracy" and "success" not in row
        assert row["value"] == pytest.approx(np.mean(mine)) and 0.0 <= row["value"] <= 1.0
        assert metrics["episodes"] == len(mine)
    assert summary_of(doc, "expert", "in-dist")["mean"] == 1.0


def test_the_template_spec_is_valid():
    spec = load_spec(Path(__file__).resolve().parents[2] / "configs" / "findings" / "example.yaml")
    assert [(e.name, e.min_episodes) for e in spec.experiments] == [("virl-sft-vs-ppo", 200), ("tvr-sft-grpo", 50)]
    assert all(len(arm.seeds) >= 3 for e in spec.experiments for arm in e.arms)
    assert spec.root == Path(__file__).resolve().parents[2] and spec.bootstrap["resamples"] == 10000
