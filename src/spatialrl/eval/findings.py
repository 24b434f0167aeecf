"""`spatialrl findings`: the papers' comparisons as evidence — rows, confidence intervals, curves, tables.

A findings spec (YAML, template ``configs/findings/example.yaml``) lists experiments → arms → seeds, each
seed a training run folder (``train``, optional) and the ``spatialrl eval`` run folders of its final model
(``eval``). From them:

- ``collect`` writes ``findings.json``: one row per (experiment, arm, seed, split or category) with
  ``episodes``, ``value`` (the metric's mean; also as ``success`` when the metric is success) and the
  compute the training run used (``gpu_seconds``, ``samples``), plus a ``summary`` per arm × split with
  the hierarchical-bootstrap 95% CI;
- ``curves`` draws a closed-loop eval metric logged during training (``eval/<split>/<metric>`` in each
  training run's ``metrics.jsonl``) against training compute, one line per arm (mean over seeds) with a
  band (bootstrap over seeds);
- ``table`` renders ``findings.json`` as Markdown for ``docs/findings.md``.

Compute comes only from what the trainers record (``docs/evaluation.md``, "Findings"): training seconds
from the ``time`` of each ``metrics.jsonl`` record (stitched across resumes, closed-loop eval time taken
out) times ``setup/processes``; samples from ``charts/env_steps`` (RL) or updates × batch (SFT). What a
run does not record is named in the row's ``compute_notes`` and left ``null``, never guessed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from spatialrl.errors import DataError, SpatialRLError
from spatialrl.io import atomic_write_json, atomic_write_text, read_jsonl, read_yaml

FORMAT = "spatialrl-findings/1"
MIN_SEEDS = 3  # the standard: >= 3 seeds per arm
BOOTSTRAP_DEFAULTS = {"resamples": 10000, "level": 0.95, "seed": 0}
X_AXES = {"gpu_seconds": "training GPU-seconds", "samples": "training samples (env steps for RL, expert samples for SFT)"}


# ------------------------------------------------------------------------------------------ spec
@dataclass
class SeedRuns:
    seed: str
    train: Path | None
    evals: list[Path]
    where: str  # the spec field, for error messages


@dataclass
class Arm:
    name: str
    label: str
    seeds: list[SeedRuns]


@dataclass
class Experiment:
    name: str
    metric: str
    overall: bool
    arms: list[Arm]
    min_episodes: int = 0  # per seed and split (the standard: V-IRL 200 per split, TVR 50 per category)


@dataclass
class Spec:
    path: Path
    experiments: list[Experiment]
    bootstrap: dict[str, Any] = field(default_factory=lambda: dict(BOOTSTRAP_DEFAULTS))
    root: Path = Path(".")  # run paths are relative to it; findings.json writes them so where they are under it

    def show(self, path: Path | None) -> str | None:
        """``path`` as findings.json records it: relative to ``root`` when under it (results committed from
        one machine stay readable on another), else absolute."""
        if path is None:
            return None
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)


def load_spec(path: str | Path, allow_fewer_seeds: bool = False) -> Spec:
    """Read and check a findings spec; each error names the spec file and the field."""
    path = Path(path)
    raw = read_yaml(path, "findings spec not found")

    def bad(where: str, want: str, got: Any) -> DataError:
        return DataError(f"{path}: {where}: expected {want}, got {got!r}")

    if not isinstance(raw, dict):
        raise bad("(top level)", "a mapping with 'experiments'", raw)
    unknown = sorted(set(raw) - {"root", "bootstrap", "experiments"})
    if unknown:
        raise DataError(f"{path}: unknown top-level field(s) {unknown}; known: root, bootstrap, experiments")
    root = (path.parent / str(raw.get("root", "."))).resolve()
    boot = dict(BOOTSTRAP_DEFAULTS)
    for k, v in (raw.get("bootstrap") or {}).items():
        if k not in boot:
            raise DataError(f"{path}: bootstrap.{k}: unknown; known: {', '.join(boot)}")
        boot[k] = v
    if not isinstance(boot["resamples"], int) or boot["resamples"] < 100:
        raise bad("bootstrap.resamples", "an integer >= 100", boot["resamples"])
    if not isinstance(boot["level"], float) or not 0 < boot["level"] < 1:
        raise bad("bootstrap.level", "a number in (0, 1)", boot["level"])
    if not isinstance(boot["seed"], int):
        raise bad("bootstrap.seed", "an integer", boot["seed"])
    exps = raw.get("experiments")
    if not isinstance(exps, dict) or not exps:
        raise bad("experiments", "a non-empty mapping of experiment name → {arms: ...}", exps)

    def run_path(value: Any, where: str) -> Path:
        if not isinstance(value, str) or not value:
            raise bad(where, "a run folder path", value)
        return (root / value).resolve() if not Path(value).is_absolute() else Path(value)

    experiments = []
    for ename, exp in exps.items():
        ew = f"experiments.{ename}"
        if not isinstance(exp, dict) or not isinstance(exp.get("arms"), dict) or not exp["arms"]:
            raise bad(f"{ew}.arms", "a non-empty mapping of arm name → {seeds: ...}", (exp or {}).get("arms"))
        unknown = sorted(set(exp) - {"arms", "metric", "overall", "min_episodes", "description"})
        if unknown:
            raise DataError(f"{path}: {ew}: unknown field(s) {unknown}; known: arms, metric, overall, min_episodes, "
                            "description")
        arms = []
        for aname, arm in exp["arms"].items():
            aw = f"{ew}.arms.{aname}"
            seeds = (arm or {}).get("seeds") if isinstance(arm, dict) else None
            if not isinstance(seeds, dict) or not seeds:
                raise bad(f"{aw}.seeds", "a mapping of seed → {train: RUN, eval: [RUN, ...]}", seeds)
            if len(seeds) < MIN_SEEDS and not allow_fewer_seeds:
                raise DataError(f"{path}: {aw}.seeds: {len(seeds)} seed(s), the findings standard is >= {MIN_SEEDS} "
                                "per arm (pass --allow-fewer-seeds for a rehearsal)")
            runs = []
            for seed, entry in seeds.items():
                sw = f"{aw}.seeds.{seed}"
                if not isinstance(entry, dict) or "eval" not in entry:
                    raise bad(sw, "{train: RUN (optional), eval: RUN or [RUN, ...]}", entry)
                unknown = sorted(set(entry) - {"train", "eval"})
                if unknown:
                    raise DataError(f"{path}: {sw}: unknown field(s) {unknown}; known: train, eval")
                evals = entry["eval"] if isinstance(entry["eval"], list) else [entry["eval"]]
                if not evals:
                    raise bad(f"{sw}.eval", "at least one eval run folder", entry["eval"])
                train = run_path(entry["train"], f"{sw}.train") if entry.get("train") is not None else None
                runs.append(SeedRuns(str(seed), train, [run_path(e, f"{sw}.eval") for e in evals], sw))
            arms.append(Arm(str(aname), str(arm.get("label", aname)), runs))
        metric = exp.get("metric", "success")
        if not isinstance(metric, str):
            raise bad(f"{ew}.metric", "an episodes.jsonl field name", metric)
        min_episodes = exp.get("min_episodes", 0)
        if isinstance(min_episodes, bool) or not isinstance(min_episodes, int) or min_episodes < 0:
            raise bad(f"{ew}.min_episodes", "an integer >= 0", min_episodes)
        experiments.append(Experiment(str(ename), metric, bool(exp.get("overall", False)), arms, min_episodes))
    return Spec(path, experiments, boot, root)


# ------------------------------------------------------------------------------------------ eval episodes
def episode_outcomes(run: Path, metric: str, where: str) -> dict[str, dict[str, float]]:
    """``{category: {episode_id: value}}`` of an eval run folder's finished episodes (errored ones left out,
    as in ``metrics.json``: an episode the policy could not answer says nothing about the agent)."""
    path = run / "episodes.jsonl"
    if not (run / "run.json").is_file() or not path.is_file():
        raise DataError(f"{where}: {run} is not an eval run folder (run.json and episodes.jsonl expected)")
    out: dict[str, dict[str, float]] = {}
    for n, record in enumerate(read_jsonl(path), 1):
        if record.get("error"):
            continue
        value = record.get(metric)
        if isinstance(value, bool):
            value = float(value)
        if not isinstance(value, int | float):
            raise DataError(f"{path}: line {n}: field {metric!r} is {value!r}, expected a number or true/false")
        cat, eid = str(record.get("category")), str(record.get("episode_id"))
        if eid in out.setdefault(cat, {}):
            raise DataError(f"{path}: episode {eid} ({cat}) recorded twice")
        out[cat][eid] = float(value)
    return out


def errored_episodes(run: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in read_jsonl(run / "episodes.jsonl"):
        if record.get("error"):
            counts[str(record.get("category"))] = counts.get(str(record.get("category")), 0) + 1
    return counts


# ------------------------------------------------------------------------------------------ compute
def _read_json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def is_eval_record(record: dict[str, Any]) -> bool:
    """A ``metrics.jsonl`` record of evaluation (closed-loop ``eval/*``, SFT ``heldout/*``, GRPO's action
    match): every training record carries ``train/*`` keys and the setup record ``setup/*``."""
    return not any(k.startswith(("train/", "setup/")) for k in record)


@dataclass
class TrainTimeline:
    """A training run's compute as its ``metrics.jsonl`` records it, one entry per record."""

    steps: list[int]
    train_seconds: list[float]  # training wall-clock up to the record: resumes stitched, eval time out
    samples: list[float | None]
    records: list[dict[str, Any]]
    processes: int | None
    trainer: str
    notes: list[str]


def train_timeline(run: Path) -> TrainTimeline:
    """Read a training run folder (``config.json``, ``metrics.jsonl``) into a :class:`TrainTimeline`.

    Training time: each record's ``time`` is seconds since that process's tracker started, so a resumed
    run starts again near 0; the segments are chained (the work redone after a resume was spent, so it
    counts). The time between a training record and the evaluation record of the same update that follows
    it is evaluation (and, at the end, the final save), not training, and is taken out; where no training
    record of the same update precedes it, it cannot be separated and stays in (said in ``notes``).
    """
    config = _read_json(run / "config.json")
    if config is None:
        raise DataError(f"{run}: no config.json; not a training run folder")
    records = list(read_jsonl(run / "metrics.jsonl"))
    if not records:
        raise DataError(f"{run}/metrics.jsonl: missing or empty; not a training run folder")
    notes: list[str] = []
    sft = isinstance(config.get("data"), dict) and "train" in config["data"]
    trainer = "sft" if sft else ("grpo" if "group_size" in config else "ppo" if "num_steps" in config else "rl")
    processes = None
    for r in records:
        if isinstance(r.get("setup/processes"), int | float):
            processes = int(r["setup/processes"])
    if processes is None:
        notes.append("no setup/processes in metrics.jsonl: GPU count unknown, gpu_seconds not given")
    per_update = None
    if sft:
        try:
            per_update = int(config["per_device_batch_size"]) * int(config["grad_accum"])
        except (KeyError, TypeError, ValueError):
            notes.append("config.json lacks per_device_batch_size/grad_accum: SFT samples not given")
    offset = prev_time = eval_s = 0.0
    resumes = unseparated = 0
    prev: dict[str, Any] | None = None
    steps, seconds, samples = [], [], []
    env_steps_by_step: dict[int, float] = {}
    for n, r in enumerate(records, 1):
        if not isinstance(r.get("time"), int | float) or not isinstance(r.get("step"), int):
            raise DataError(f"{run}/metrics.jsonl: line {n} has no numeric 'time'/'step'")
        t = float(r["time"])
        if prev is not None and t < prev_time:
            offset += prev_time  # a new process (resume): its clock restarted
            resumes += 1
        if is_eval_record(r) and prev is not None:
            if not is_eval_record(prev) and prev["step"] == r["step"]:
                eval_s += offset + t - prev["_t"]
            elif not is_eval_record(prev):
                unseparated += 1
        r = {**r, "_t": offset + t}
        steps.append(r["step"])
        seconds.append(offset + t - eval_s)
        if isinstance(r.get("charts/env_steps"), int | float):
            env_steps_by_step[r["step"]] = float(r["charts/env_steps"])
        prev, prev_time = r, t
    if sft:
        samples = [None if per_update is None or processes is None else float(s * per_update * processes)
                   for s in steps]
    else:
        known = sorted(env_steps_by_step)
        if not known:
            notes.append("no charts/env_steps in metrics.jsonl: RL samples not given")
            samples = [None] * len(steps)
        else:  # eval records carry no counter: the count at their update (interpolated if not logged there)
            samples = [float(np.interp(s, [0, *known], [0.0, *[env_steps_by_step[k] for k in known]]))
                       for s in steps]
    if resumes:
        notes.append(f"resumed {resumes} time(s): the segments' times are chained (redone updates count)")
    if unseparated:
        notes.append(f"{unseparated} evaluation record(s) not preceded by a training record of the same update: "
                     "their eval time stays in the training time")
    if processes is not None:
        notes.append("device type not recorded by the trainer: gpu_seconds = training seconds × processes "
                     "(one accelerator per process)")
    return TrainTimeline(steps, seconds, samples, records, processes, trainer, notes)


def train_compute(run: Path | None) -> dict[str, Any]:
    """The compute fields of a row: ``gpu_seconds``, ``train_seconds``, ``processes``, ``samples``,
    ``samples_kind``, ``trainer``, ``updates``, ``compute_notes``."""
    if run is None:
        return {"train_run": None, "gpu_seconds": None, "samples": None,
                "compute_notes": ["no training run in the spec for this seed"]}
    tl = train_timeline(run)
    train_s = tl.train_seconds[-1]
    return {"train_run": str(run), "trainer": tl.trainer, "updates": max(tl.steps),
            "train_seconds": round(train_s, 3), "processes": tl.processes,
            "gpu_seconds": None if tl.processes is None else round(train_s * tl.processes, 3),
            "samples": tl.samples[-1],
            "samples_kind": "expert_samples" if tl.trainer == "sft" else "env_steps",
            "compute_notes": tl.notes}


# ------------------------------------------------------------------------------------------ unseen check
def _episode_keys(task: str, options: dict[str, Any], ids: set[str] | None, cache: dict[str, Any]) -> dict[str, str]:
    """``{episode_id: key}`` for the suite's episodes under ``options`` (only ``ids`` when given). The key is
    what defines an episode — its reset options, seed and the task data folder — so two runs' episodes
    are the same exactly when their keys are; bare ids are not enough (V-IRL's ``in-dist-000`` under
    another route seed is another episode)."""
    from spatialrl.envs.registry import get_suite

    memo = json.dumps([task, options], sort_keys=True, default=str)
    if memo not in cache:
        specs = get_suite(task).episodes(dict(options))

        def norm(v: Any) -> Any:  # one spelling per data folder (relative vs absolute paths)
            if isinstance(v, dict):
                return {k: norm(x) for k, x in v.items()}
            if isinstance(v, str) and ("/" in v or v.startswith(".")) and Path(v).expanduser().exists():
                return str(Path(v).expanduser().resolve())
            return v

        data = norm(options.get("data"))
        cache[memo] = {s.episode_id: json.dumps([task, data, norm(s.reset_options), s.seed], sort_keys=True, default=str)
                       for s in specs}
    keys = cache[memo]
    return {i: k for i, k in keys.items() if ids is None or i in ids}


def training_episode_keys(run: Path, cache: dict[str, Any]) -> tuple[set[str] | None, str]:
    """The keys of the episodes a training run learnt from, as far as the run records them, and how they
    were found (or why not). SFT: the dataset folder's ``samples.jsonl`` episode ids under its
    ``meta.json`` options (per source of a merged dataset); RL: the episodes of ``task`` in ``config.json``."""
    from types import SimpleNamespace

    config = _read_json(run / "config.json") or {}
    if isinstance(config.get("data"), dict) and config["data"].get("train"):
        data = Path(config["data"]["train"])
        meta = _read_json(data / "meta.json")
        if meta is None:
            return None, f"SFT data {data} not found: training episodes unknown"
        rows = list(read_jsonl(data / "samples.jsonl"))
        sources = meta.get("source_meta") or [meta]
        counts = [int(m.get("samples", -1)) for m in sources]
        if sum(counts) != len(rows):
            return None, f"SFT data {data}: samples per source do not add up; training episodes unknown"
        keys: set[str] = set()
        start = 0
        for m, count in zip(sources, counts, strict=True):
            ids = {str(r["episode_id"]) for r in rows[start:start + count]}
            start += count
            keys |= set(_episode_keys(str(m["task"]), m.get("options") or {}, ids, cache).values())
        return keys, f"SFT data {data}: {len(keys)} episodes"
    task = config.get("task")
    if isinstance(task, dict) and task.get("name"):
        from spatialrl.envs.registry import get_suite
        from spatialrl.train.task_stream import task_options

        cfg = SimpleNamespace(data=task.get("data"), split=task.get("split"), options=task.get("options") or {})
        options = task_options(get_suite(task["name"]), cfg)
        keys_by_id = _episode_keys(task["name"], options, None, cache)
        limit = int(task.get("limit") or 0)
        chosen = list(keys_by_id.values())[:limit] if limit > 0 else list(keys_by_id.values())
        return set(chosen), f"RL task {task['name']} split {task.get('split')}: {len(chosen)} episodes"
    return None, "config.json names no SFT data or RL task: training episodes unknown"


def check_unseen(train: Path, evals: list[Path], where: str, cache: dict[str, Any]) -> str:
    """Raise when an eval run holds an episode the training run learnt from; else say what was checked,
    or why it could not be (``not checked: ...``; e.g. the task data is not on this machine)."""
    try:
        seen, how = training_episode_keys(train, cache)
    except SpatialRLError as e:
        return f"not checked: the training episodes of {train} cannot be listed ({e})"
    if seen is None:
        return f"not checked: {how}"
    n = 0
    for run in evals:
        config = _read_json(run / "run.json") or {}
        ids = {str(r.get("episode_id")) for r in read_jsonl(run / "episodes.jsonl")}
        try:
            keys = _episode_keys(str(config.get("task")), config.get("options") or {}, ids, cache)
        except SpatialRLError as e:
            return f"not checked: the episodes of {run} cannot be listed ({e})"
        overlap = sorted(i for i, k in keys.items() if k in seen)
        if overlap:
            raise DataError(f"{where}.eval: {run} evaluates {len(overlap)} episode(s) the training run {train} "
                            f"learnt from ({how}), e.g. {', '.join(overlap[:3])}; evaluate on episodes never seen "
                            "in training (another split, seed or data folder)")
        n += len(keys)
    return f"passed: none of {n} eval episodes among the training episodes ({how})"


# ------------------------------------------------------------------------------------------ bootstrap
def hierarchical_bootstrap(groups: list[np.ndarray] | list[list[float]], resamples: int = 10000,
                           level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean over seeds of each seed's mean outcome and its percentile CI from a
    two-level bootstrap — resample the seeds with replacement, then each drawn seed's episodes with
    replacement (its own count) — so the interval carries both the between-seed and the episode noise
    (Saravanan et al. 2020, "Application of the hierarchical bootstrap to multi-level data").

    Vectorised over resamples in chunks (about 2M draws each); deterministic by ``seed`` for given data.
    """
    arrays = [np.asarray(g, dtype=np.float64) for g in groups]
    if not arrays or any(a.size == 0 for a in arrays):
        raise DataError("hierarchical_bootstrap: every seed needs at least one episode")
    n_seeds = len(arrays)
    counts = np.array([a.size for a in arrays])
    width = int(counts.max())
    values = np.zeros((n_seeds, width))
    for s, a in enumerate(arrays):
        values[s, : a.size] = a
    rng = np.random.default_rng(seed)
    stats = np.empty(resamples)
    chunk = max(1, 2_000_000 // (n_seeds * width))
    positions = np.arange(width)
    for start in range(0, resamples, chunk):
        b = min(chunk, resamples - start)
        drawn = rng.integers(0, n_seeds, size=(b, n_seeds))  # seeds, with replacement
        n = counts[drawn]  # (b, S): each drawn seed keeps its own episode count
        episode = np.floor(rng.random((b, n_seeds, width)) * n[..., None]).astype(np.int64)
        picked = values[drawn[..., None], episode]
        picked[positions[None, None, :] >= n[..., None]] = 0.0  # draws past a short seed's count
        stats[start:start + b] = (picked.sum(-1) / n).mean(-1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(stats, [alpha, 1.0 - alpha])
    return float(np.mean([a.mean() for a in arrays])), float(low), float(high)


def seed_bootstrap(values: np.ndarray, resamples: int, level: float, seed: int) -> tuple[float, float, float]:
    """``(mean, low, high)`` of a mean over seeds, seeds resampled (the curves' band: a logged metric per seed)."""
    rng = np.random.default_rng(seed)
    stats = values[rng.integers(0, values.size, size=(resamples, values.size))].mean(-1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(stats, [alpha, 1.0 - alpha])
    return float(values.mean()), float(low), float(high)


# ------------------------------------------------------------------------------------------ collect
def collect(spec: Spec, check_overlap: bool = True, allow_fewer_episodes: bool = False) -> dict[str, Any]:
    """The ``findings.json`` document of a spec: ``rows`` (per experiment, arm, seed, split) and ``summary``
    (per experiment, arm, split: mean and CI over seeds and episodes). A seed's split with fewer finished
    episodes than the experiment's ``min_episodes`` is refused unless ``allow_fewer_episodes``."""
    rows: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    cache: dict[str, Any] = {}
    for exp in spec.experiments:
        for arm in exp.arms:
            per_split: dict[str, list[np.ndarray]] = {}
            for sr in arm.seeds:
                compute = {**train_compute(sr.train), "train_run": spec.show(sr.train)}
                unseen = "no training run: nothing to overlap"
                if sr.train is not None:
                    unseen = check_unseen(sr.train, sr.evals, f"{spec.path}: {sr.where}", cache) if check_overlap \
                        else "not checked (--no-check-unseen)"
                outcomes: dict[str, dict[str, float]] = {}
                errors: dict[str, int] = {}
                sources: dict[str, str] = {}
                for run in sr.evals:
                    for cat, eps in episode_outcomes(run, exp.metric, f"{spec.path}: {sr.where}.eval").items():
                        if cat in outcomes:
                            raise DataError(f"{spec.path}: {sr.where}.eval: split {cat!r} is in both {sources[cat]} "
                                            f"and {run}; give each split once per seed")
                        outcomes[cat], sources[cat] = eps, str(spec.show(run))
                    for cat, k in errored_episodes(run).items():
                        errors[cat] = errors.get(cat, 0) + k
                if exp.overall and len(outcomes) > 1:
                    outcomes["overall"] = {f"{c}/{i}": v for c, eps in outcomes.items() for i, v in eps.items()}
                    sources["overall"] = ", ".join(sorted({str(spec.show(r)) for r in sr.evals}))
                    errors["overall"] = sum(errors.values())
                for split in sorted(outcomes):
                    eps = outcomes[split]
                    values = [eps[i] for i in sorted(eps)]
                    if len(values) < exp.min_episodes and not allow_fewer_episodes:
                        raise DataError(f"{spec.path}: {sr.where}.eval: {len(values)} finished episode(s) of "
                                        f"{split!r} in {sources[split]}, below experiments.{exp.name}.min_episodes "
                                        f"{exp.min_episodes} (pass --allow-fewer-episodes for a rehearsal)")
                    mean = float(np.mean(values)) if values else None
                    # value: the metric's mean over the episodes; success too when that is the metric (a
                    # per-step-accuracy row has no success field rather than one holding another metric)
                    rows.append({"experiment": exp.name, "arm": arm.name, "label": arm.label, "seed": sr.seed,
                                 "split": split, "metric": exp.metric, "episodes": len(values), "value": mean,
                                 **({"success": mean} if exp.metric == "success" else {}),
                                 "errors": errors.get(split, 0), "eval_run": sources[split], **compute,
                                 "unseen_check": unseen, "outcomes": values})
                    if values:
                        per_split.setdefault(split, []).append(np.asarray(values))
            for split, groups in sorted(per_split.items()):
                b = spec.bootstrap
                mean, low, high = hierarchical_bootstrap(groups, b["resamples"], b["level"], b["seed"])
                arm_rows = [r for r in rows if r["experiment"] == exp.name and r["arm"] == arm.name
                            and r["split"] == split]
                summary.append({"experiment": exp.name, "arm": arm.name, "label": arm.label, "split": split,
                                "metric": exp.metric, "mean": mean, "ci_low": low, "ci_high": high,
                                "seeds": len(groups), "episodes": int(sum(g.size for g in groups)),
                                "gpu_seconds_mean": _mean_known([r.get("gpu_seconds") for r in arm_rows]),
                                "samples_mean": _mean_known([r.get("samples") for r in arm_rows])})
    return {"format": FORMAT, "spec": str(spec.path), "root": str(spec.root), "bootstrap": {**spec.bootstrap, "method": (
        "hierarchical: resample seeds, then episodes within each drawn seed; percentile interval")},
            "rows": rows, "summary": summary}


def _mean_known(values: list[Any]) -> float | None:
    known = [float(v) for v in values if isinstance(v, int | float)]
    return float(np.mean(known)) if known and len(known) == len(values) else None


# ------------------------------------------------------------------------------------------ table
def findings_table(doc: dict[str, Any], experiment: str | None = None, digits: int = 1) -> str:
    """Markdown, one table per experiment: arms × splits, ``mean [low, high] (n seeds, m episodes)`` in %,
    then the mean compute per seed."""
    if doc.get("format") != FORMAT:
        raise DataError(f"findings file: format {doc.get('format')!r}, expected {FORMAT!r} (write it with "
                        "`spatialrl findings collect`)")
    level = float(doc.get("bootstrap", {}).get("level", 0.95))
    names = list(dict.fromkeys(s["experiment"] for s in doc["summary"]))
    if experiment is not None:
        if experiment not in names:
            raise DataError(f"--experiment {experiment!r}: not in the findings file (has {', '.join(names)})")
        names = [experiment]
    out = []
    for name in names:
        items = [s for s in doc["summary"] if s["experiment"] == name]
        splits = list(dict.fromkeys(s["split"] for s in items))
        if "overall" in splits:
            splits = [s for s in splits if s != "overall"] + ["overall"]
        arms = list(dict.fromkeys((s["arm"], s["label"]) for s in items))
        out.append(f"**{name}** — {items[0]['metric']}, % (mean over seeds [{100 * level:.0f}% CI, hierarchical "
                   "bootstrap over seeds and episodes])\n")
        out.append("| arm | " + " | ".join(splits) + " | GPU-s / seed | samples / seed |")
        out.append("|---|" + "---|" * len(splits) + "---:|---:|")
        for arm, label in arms:
            cells = []
            for split in splits:
                s = next((x for x in items if x["arm"] == arm and x["split"] == split), None)
                cells.append("–" if s is None else
                             f"{100 * s['mean']:.{digits}f} [{100 * s['ci_low']:.{digits}f}, "
                             f"{100 * s['ci_high']:.{digits}f}] ({s['seeds']} seeds, {s['episodes']} episodes)")
            first = next(x for x in items if x["arm"] == arm)
            gpu, samples = first.get("gpu_seconds_mean"), first.get("samples_mean")
            out.append(f"| {label} | " + " | ".join(cells) + f" | {'–' if gpu is None else f'{gpu:.0f}'} | "
                       f"{'–' if samples is None else f'{samples:.0f}'} |")
        out.append(_compute_match(items))
        out.append("")
    return "\n".join(out)


def _compute_match(items: list[dict[str, Any]]) -> str:
    """One line stating how closely the trained arms' compute matches (the comparisons are at matched
    compute; a reader should see the ratio rather than assume it)."""
    arms: dict[str, dict[str, Any]] = {}
    for s in items:
        arms.setdefault(s["label"], s)
    parts = []
    for key, what in (("gpu_seconds_mean", "GPU-seconds"), ("samples_mean", "samples")):
        known = {label: s[key] for label, s in arms.items() if isinstance(s.get(key), int | float)}
        if len(known) >= 2 and min(known.values()) > 0:
            lo, hi = min(known, key=known.get), max(known, key=known.get)  # type: ignore[arg-type]
            if known[lo] == known[hi]:
                parts.append(f"{what} per seed equal ({known[lo]:.0f})")
                continue
            parts.append(f"{what} per seed {known[lo]:.0f} ({lo}) to {known[hi]:.0f} ({hi}), "
                         f"×{known[hi] / known[lo]:.2f}")
    if not parts:
        return "\nTraining compute: fewer than two trained arms record it; no match to state.\n"
    return "\nTraining compute across trained arms: " + "; ".join(parts) + ".\n"


# ------------------------------------------------------------------------------------------ curves
# The closed-loop eval keys whose per-episode field is known, for the curves' hierarchical band.
EPISODE_FIELDS = {"success_rate": "success"}


def step_outcomes(run: Path, step: int, key: str) -> list[float] | None:
    """The per-episode outcomes behind a logged ``eval/<category>/<metric>`` at ``step``: the closed-loop
    eval folder ``OUTPUT/eval/step-NNNNNN`` the trainers keep; None where it or the field is not there."""
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != "eval" or parts[2] not in EPISODE_FIELDS:
        return None
    folder = run / "eval" / f"step-{step:06d}"
    if not (folder / "episodes.jsonl").is_file():
        return None
    try:
        by_cat = episode_outcomes(folder, EPISODE_FIELDS[parts[2]], str(folder))
    except DataError:
        return None
    if parts[1] == "overall":
        return [v for eps in by_cat.values() for v in eps.values()] or None
    return list(by_cat.get(parts[1], {}).values()) or None


def arm_curve(arm: Arm, key: str, x: str, bootstrap: dict[str, Any]) -> dict[str, list[Any]] | None:
    """``{x, mean, low, high, seeds, band}`` per logged update of ``key``: x averaged over the arm's seeds,
    the metric's mean over the seeds that logged it then, and its band: the hierarchical bootstrap over
    seeds and episodes when every seed's eval folder of that update is there and the key is a success rate
    (``band`` "seeds+episodes"), else a bootstrap over the seeds' logged values ("seeds"). None without
    training runs."""
    per_step: dict[int, list[tuple[float, float, list[float] | None]]] = {}
    runs = [sr for sr in arm.seeds if sr.train is not None]
    if not runs:
        return None
    for sr in runs:
        assert sr.train is not None
        tl = train_timeline(sr.train)
        mine: dict[int, tuple[float, float]] = {}  # a resumed run logs a redone update again: keep the last
        for i, r in enumerate(tl.records):
            v = r.get(key)
            if not isinstance(v, int | float) or isinstance(v, bool):
                continue
            if x == "gpu_seconds":
                if tl.processes is None:
                    raise DataError(f"{sr.train}: no setup/processes in metrics.jsonl; --x gpu_seconds needs it")
                at = tl.train_seconds[i] * tl.processes
            else:
                at = tl.samples[i]
                if at is None:
                    raise DataError(f"{sr.train}: samples not recorded ({'; '.join(tl.notes)}); use --x gpu_seconds")
            mine[r["step"]] = (float(at), float(v))
        for step, (at, v) in mine.items():
            per_step.setdefault(step, []).append((at, v, step_outcomes(sr.train, step, key)))
    out: dict[str, list[Any]] = {"x": [], "mean": [], "low": [], "high": [], "seeds": [], "band": []}
    b = bootstrap
    for step in sorted(per_step):
        points = per_step[step]
        xs = np.array([p[0] for p in points])
        groups = [p[2] for p in points]
        if all(g is not None for g in groups):
            mean, low, high = hierarchical_bootstrap(groups, b["resamples"], b["level"], b["seed"])  # type: ignore[arg-type]
            band = "seeds+episodes"
        else:
            mean, low, high = seed_bootstrap(np.array([p[1] for p in points]), b["resamples"], b["level"], b["seed"])
            band = "seeds"
        for k, v in zip(out, (float(xs.mean()), mean, low, high, float(len(points)), band), strict=True):
            out[k].append(v)
    return out


def plot_findings_curves(spec: Spec, key: str, x: str, out: str | Path, experiment: str | None = None,
                         title: str | None = None) -> Path:
    """OOD accuracy (any logged ``key``) against training compute, one line per arm with its band (PNG)."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if x not in X_AXES:
        raise DataError(f"--x: expected one of {', '.join(X_AXES)}, got {x!r}")
    exps = spec.experiments
    if experiment is not None:
        exps = [e for e in exps if e.name == experiment]
        if not exps:
            raise DataError(f"--experiment {experiment!r}: not in {spec.path}")
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    drawn = 0
    for exp in exps:
        for arm in exp.arms:
            curve = arm_curve(arm, key, x, spec.bootstrap)
            if not curve or not curve["x"]:
                continue
            name = arm.label if len(exps) == 1 else f"{exp.name}: {arm.label}"
            line, = ax.plot(curve["x"], curve["mean"], marker="o", markersize=3, label=name)
            ax.fill_between(curve["x"], curve["low"], curve["high"], color=line.get_color(), alpha=0.2, linewidth=0)
            drawn += 1
    if not drawn:
        raise DataError(f"{spec.path}: no training run logs {key!r} (closed-loop eval keys look like "
                        "eval/<split>/<metric>, e.g. eval/visual-ood/success_rate)")
    ax.set_xlabel(X_AXES[x])
    ax.set_ylabel(key)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or f"{key}: mean over seeds, {100 * spec.bootstrap['level']:.0f}% bootstrap band", fontsize=9)
    fig.tight_layout()
    from spatialrl.io import save_png

    return save_png(fig, out)


# ------------------------------------------------------------------------------------------ CLI
app = typer.Typer(help="The papers' comparisons: rows with compute, bootstrap CIs, curves, tables.",
                  no_args_is_help=True)


def _fail(e: SpatialRLError) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"[red]error:[/red] {e}")
    raise typer.Exit(2)


@app.command("collect")
def collect_command(
    spec: Annotated[Path, typer.Option(help="Findings spec (YAML; template configs/findings/example.yaml).")],
    out: Annotated[Path, typer.Option(help="findings.json to write.")] = Path("docs/results/findings/findings.json"),
    allow_fewer_seeds: Annotated[bool, typer.Option("--allow-fewer-seeds",
                                                    help=f"Accept arms with < {MIN_SEEDS} seeds (rehearsals).")] = False,
    allow_fewer_episodes: Annotated[bool, typer.Option("--allow-fewer-episodes", help=(
        "Accept splits with fewer episodes than the experiment's min_episodes (rehearsals)."))] = False,
    check_unseen_: Annotated[bool, typer.Option("--check-unseen/--no-check-unseen", help=(
        "Refuse eval runs holding episodes the training run learnt from (needs the task data on this machine)."))] = True,
) -> None:
    """One row per (experiment, arm, seed, split) with episodes, success and compute; CIs per arm × split."""
    try:
        doc = collect(load_spec(spec, allow_fewer_seeds), check_overlap=check_unseen_,
                      allow_fewer_episodes=allow_fewer_episodes)
        atomic_write_json(out, doc)
        unchecked = sorted({(r["experiment"], r["arm"], r["seed"], r["unseen_check"]) for r in doc["rows"]
                            if r["unseen_check"].startswith("not checked")})
        for exp, arm, seed, why in unchecked:
            print(f"warning: {exp}/{arm}/seed {seed}: eval episodes {why}")
        print(f"{len(doc['rows'])} rows, {len(doc['summary'])} arm × split summaries → {out}")
    except SpatialRLError as e:
        _fail(e)


@app.command("curves")
def curves_command(
    spec: Annotated[Path, typer.Option(help="Findings spec (YAML).")],
    key: Annotated[str, typer.Option(help="metrics.jsonl key, e.g. eval/visual-ood/success_rate.")],
    out: Annotated[Path, typer.Option(help="PNG to write.")],
    x: Annotated[str, typer.Option(help="x axis: gpu_seconds or samples.")] = "gpu_seconds",
    experiment: Annotated[str | None, typer.Option(help="Only this experiment's arms.")] = None,
    title: Annotated[str | None, typer.Option()] = None,
    allow_fewer_seeds: Annotated[bool, typer.Option("--allow-fewer-seeds",
                                                    help=f"Accept arms with < {MIN_SEEDS} seeds.")] = False,
) -> None:
    """A logged metric (e.g. OOD success) against training compute, per arm: mean over seeds with a band."""
    try:
        print(plot_findings_curves(load_spec(spec, allow_fewer_seeds), key, x, out, experiment, title))
    except SpatialRLError as e:
        _fail(e)


@app.command("table")
def table_command(
    findings: Annotated[Path, typer.Option(help="findings.json written by `spatialrl findings collect`.")] = Path(
        "docs/results/findings/findings.json"),
    experiment: Annotated[str | None, typer.Option(help="Only this experiment.")] = None,
    out: Annotated[Path | None, typer.Option(help="Also write the Markdown here.")] = None,
) -> None:
    """Markdown: arms × splits, "mean \\[low, high] (n seeds, m episodes)", for docs/findings.md."""
    try:
        if not findings.is_file():
            raise DataError(f"{findings}: not found (write it with `spatialrl findings collect`)")
        text = findings_table(json.loads(findings.read_text(encoding="utf-8")), experiment)
        if out is not None:
            atomic_write_text(out, text)
        print(text, end="")
    except SpatialRLError as e:
        _fail(e)
