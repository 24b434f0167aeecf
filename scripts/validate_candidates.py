"""Validate trained TVR candidates against the shipped models they would replace, in one command: the ship
decision of the plans in ``docs/results/builtin/*-plan/decision-rule.md``.

    python scripts/validate_candidates.py tvr-ao-sft=/work/scratch/r22/tvr-ao-joined \\
        tvr-ao-sft=/work/scratch/r22/tvr-ao-joined-dagger tvr-va-sft=/work/scratch/r22/tvr-va-joined \\
        --bench /work/scratch/bench-val --out runs/val-r22

Each ``NAME=DIR`` names a built-in model (NAME) and a folder of weights (DIR) that would replace it; a NAME
may come more than once (several arms competing for one model: the shipped model is evaluated once). For
each NAME:

1. ``spatialrl eval`` of ``builtin:NAME`` and of each ``hf:DIR`` on the validation bench's ``eval`` split
   (runs ``OUT/NAME-shipped`` and ``OUT/NAME-candidate-<DIR's name>``), each at its recorded settings, greedy.
   Visual-action (VA) models at ``--batch-size`` 20 (a VA evaluation at 50 ran out of the 24 GB VM's memory,
   docs/troubleshooting.md), the others at 50. Candidates are decoded with the shipped model's tried-actions
   penalty (its recorded ``eval.tried_penalty``, docs/evaluation.md; 0 when it has none), so both sides use
   one decoding rule: a candidate's own folder records none.
2. The image probe (``spatialrl model probe``, ``--probe-states`` held-out states) of each, action-only only
   (it is the plans' tie-break between action-only arms).
3. ``spatialrl report`` of the shipped run and the candidates' (``OUT/NAME-report``): the episode-by-episode
   comparison with its paired bootstrap interval against the shipped model.
4. The rule: the best candidate (most successes; on a tie the higher probe optimal accuracy, then the first
   given) ships when its successes reach the shipped model's on the same episodes and machine plus ``--bar``.

The bench is made when ``--bench`` does not exist (seed 1, 100 eval episodes: the plans' validation split,
never trained on: training benches use other seeds). Evaluations resume: rerunning with the same ``--out``
does not redo a finished run, so adding an arm later costs only its own evaluation. A run made elsewhere
stands in only if it records the same agent and ``--bench`` path (``spatialrl eval`` refuses an ``--out``
whose recorded agent or data differ), so the shipped model is usually evaluated again, which also rechecks
that its result reproduces. Prints a table and writes ``OUT/decision.json``.
TVR only: V-IRL's validation routes are made by its own dataset commands.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def cli(*args: str, capture: bool = False) -> str:
    """One ``spatialrl`` command in a fresh process (what a person would type), failing loudly."""
    done = subprocess.run([sys.executable, "-m", "spatialrl.cli", *args], text=True,
                          stdout=subprocess.PIPE if capture else None, check=False)
    if done.returncode != 0:
        sys.exit(f"validate_candidates: `spatialrl {' '.join(args)}` failed (exit {done.returncode})")
    return done.stdout or ""


def settings_of(agent: str) -> dict:
    from spatialrl.models.builtin import model_eval_settings

    settings = model_eval_settings(agent)
    if settings is None or settings.get("task") != "tvr":
        sys.exit(f"validate_candidates: {agent} records no TVR evaluation settings (spatialrl_model.json → eval); "
                 "this script validates TVR models")
    return settings


def evaluate(agent: str, bench: Path, out: Path, episodes: int | None, tried_penalty: str | float) -> dict:
    va = settings_of(agent)["options"].get("memory") == "va"
    args = ["eval", "--task", "tvr", "--agent", agent, "--data", str(bench), "--split", "eval",
            "--batch-size", "20" if va else "50", "--out", str(out), "--no-report", "--tried-penalty", str(tried_penalty)]
    if episodes:
        args += ["--limit", str(episodes)]
    cli(*args)
    from spatialrl.eval.paired import successes
    from spatialrl.eval.runs import load_run

    solved = successes(load_run(out).episodes)  # per episode, as the paired report counts them
    metrics = json.loads((out / "metrics.json").read_text())
    return {"run": str(out), "episodes": len(solved), "successes": sum(solved.values()),
            "success_rate": metrics["overall"]["success_rate"], "memory": "va" if va else "ao",
            "per_category": {c: m.get("success_rate") for c, m in metrics.items() if c != "overall"},
            "tried_penalty": tried_penalty}


def probe(agent: str, bench: Path, states: int) -> dict:
    out = json.loads(cli("model", "probe", agent, "--data", str(bench), "--states", str(states), capture=True))
    return {k: out[k] for k in ("optimal_accuracy", "target_swap_tv") if k in out} or out


def best_candidate(candidates: list[dict]) -> dict:
    """The plans' choice between arms: most successes, then the higher probe optimal accuracy, then the first."""
    def key(c: dict) -> tuple:
        return c["successes"], c.get("probe", {}).get("optimal_accuracy", float("-inf"))
    return max(candidates, key=key)  # max keeps the first of equal keys


def main() -> None:
    from spatialrl.agents.tried_actions import penalty_text, recorded_penalty

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("candidates", nargs="+", metavar="NAME=DIR",
                    help="shipped model name = candidate weights folder (a NAME may repeat: competing arms)")
    ap.add_argument("--bench", type=Path, required=True, help="validation bench folder (made with seed 1 if absent)")
    ap.add_argument("--out", type=Path, required=True, help="folder for the runs, reports and decision.json")
    ap.add_argument("--bar", type=int, default=3, help="successes over the shipped model needed to ship")
    ap.add_argument("--episodes", type=int, default=None, help="first N eval episodes only (a rehearsal)")
    ap.add_argument("--probe-states", type=int, default=200, help="probe states per action-only model (0: none)")
    args = ap.parse_intermixed_args()  # NAME=DIR items may come after the options too
    arms: dict[str, list[Path]] = {}
    for item in args.candidates:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            ap.error(f"candidate {item!r}: expected NAME=DIR, e.g. tvr-ao-sft=weights/tvr-ao-joined")
        if not Path(folder).is_dir():
            ap.error(f"candidate {item!r}: {folder} is not a folder")
        if any(Path(folder).name == f.name for f in arms.get(name, [])):
            ap.error(f"candidate {item!r}: another {name} candidate's folder is also named {Path(folder).name!r} "
                     "(runs are named after it)")
        arms.setdefault(name, []).append(Path(folder))
    if not args.bench.exists():
        cli("tvr", "make-bench", "--out", str(args.bench), "--seed", "1",
            "--sizes", "eval=100,sft=0,rl=0,diag_rotate=0,diag_move=0")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, folders in arms.items():
        shipped = f"builtin:{name}"
        tried = penalty_text(recorded_penalty(settings_of(shipped)))
        old = evaluate(shipped, args.bench, args.out / f"{name}-shipped", args.episodes, tried)
        probing = args.probe_states and old["memory"] == "ao"
        if probing:
            old["probe"] = probe(shipped, args.bench, args.probe_states)
        news = []
        for folder in folders:
            agent = f"hf:{folder.resolve()}"
            new = evaluate(agent, args.bench, args.out / f"{name}-candidate-{folder.name}", args.episodes, tried)
            if new["memory"] != old["memory"]:
                sys.exit(f"validate_candidates: {name} is a {old['memory']} model and {folder} a {new['memory']} one")
            if probing:
                new["probe"] = probe(agent, args.bench, args.probe_states)
            news.append({"candidate": str(folder), **new})
        cli("report", old["run"], *(n["run"] for n in news), "--out", str(args.out / f"{name}-report"),
            "--episodes-per-run", "0")
        best = best_candidate(news)
        needed = old["successes"] + args.bar
        rows.append({"name": name, "candidate": best["candidate"], "shipped": old, "new": best,
                     "candidates": news, "needed": needed, "ships": best["successes"] >= needed})
    print(f"\n{'model':<12} {'candidate':<28} {'shipped':>9} {'candidate':>10} {'needed':>7}  decision")
    for r in rows:
        for c in r["candidates"]:
            n = c["episodes"]
            verdict = ("ships" if r["ships"] else "does not ship") if c is r["new"] else "not the best arm"
            print(f"{r['name']:<12} {Path(c['candidate']).name:<28} {r['shipped']['successes']:>5}/{n:<3} "
                  f"{c['successes']:>6}/{n:<3} {r['needed']:>7}  {verdict}")
    from spatialrl.io import atomic_write_json

    atomic_write_json(args.out / "decision.json", {"bench": str(args.bench), "bar": args.bar, "rows": rows})
    print(f"wrote {args.out / 'decision.json'}; paired tables in {args.out}/*-report/report.md")


if __name__ == "__main__":
    main()
