"""Ship a continued model as a built-in one: copy a run's weights folder (what `train_builtin.sh` returns
under $OUT, unpacked) into ``src/spatialrl/models/weights/<name>/`` with its lineage recorded.

    python scripts/ship_model.py RUN_DIR NAME --trained-on "..." --command "..." [--base builtin:...]

What is copied: the weights, tokenizer, processor, chat template and generation config. What is changed:
- ``config.json``: the sub-configs' ``dtype`` (the training run's, float32) is dropped, so that the model
  loads in the dtype the caller asks for; the top level keeps its ``dtype``.
- ``tokenizer_config.json``: ``is_local`` / ``local_files_only`` (the run's loading flags) are dropped.
- ``spatialrl_model.json``: the record of the model it was continued from (``--base``, default the run
  record's ``source`` or its recipe's ``model.path``; read before anything is written, so ship a model
  continued from another shipped one before replacing that one), with this run's ``eval`` settings (what
  `spatialrl eval hf:` applies; the base's ``tried_penalty`` is kept, docs/evaluation.md), and one more entry in its ``continued`` list: from, updates, trained_on,
  command, recipe, dataset.

Nothing is written unless every input file is present and readable (a clear error names what is missing).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = ROOT / "src/spatialrl/models/weights"
COPIED = ("chat_template.jinja", "generation_config.json", "model.safetensors", "processor_config.json",
          "tokenizer.json")
RUN_ONLY_TOKENIZER_KEYS = ("is_local", "local_files_only")


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        sys.exit(f"ship_model: {path} is missing")
    except json.JSONDecodeError as exc:
        sys.exit(f"ship_model: {path} is not JSON ({exc})")


def shipped_config(config: dict) -> dict:
    """The run's config.json without its sub-configs' training dtype."""
    return {k: ({kk: vv for kk, vv in v.items() if kk != "dtype"} if isinstance(v, dict) else v)
            for k, v in config.items()}


def lineage(base: dict, run: dict, base_name: str, trained_on: str, command: str) -> dict:
    """The base model's record, this run's eval settings, and this run appended to ``continued``."""
    chain = base.get("continued", [])
    chain = [chain] if isinstance(chain, dict) else list(chain)  # one dict before 2026-12-07's second ship
    missing = [k for k in ("updates", "recipe", "dataset", "eval") if k not in run]
    if missing:
        sys.exit(f"ship_model: the run's spatialrl_model.json lacks {missing}")
    chain.append({"from": base_name, "updates": run["updates"], "trained_on": trained_on, "command": command,
                  "recipe": run["recipe"], "dataset": run["dataset"]})
    settings = dict(run["eval"])
    if "tried_penalty" in base.get("eval", {}) and "tried_penalty" not in settings:
        # a decoding rule chosen on validation for the model this one replaces, under which the candidate
        # was validated too (validate_candidates.py): it stays until a plan changes it
        settings["tried_penalty"] = base["eval"]["tried_penalty"]
    return {**base, "eval": settings, "continued": chain}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("name", help="the built-in name, e.g. tvr-va-sft")
    ap.add_argument("--base", default=None, help="the model it was continued from (default: the run's source)")
    ap.add_argument("--trained-on", required=True, help="machine, date, budget, data, how it was chosen")
    ap.add_argument("--command", required=True, help="the command that trained it")
    args = ap.parse_args()
    run = read_json(args.run_dir / "spatialrl_model.json")
    # a finished run records its init as `source`; a paused run's snapshot only in its recipe
    base_name = args.base or run.get("source") or (run.get("recipe") or {}).get("model", {}).get("path")
    if not base_name or not base_name.startswith("builtin:"):
        sys.exit(f"ship_model: the base model must be a shipped one (builtin:NAME), got {base_name!r}")
    base = read_json(WEIGHTS / base_name.removeprefix("builtin:") / "spatialrl_model.json")
    record = lineage(base, run, base_name, args.trained_on, args.command)
    config = shipped_config(read_json(args.run_dir / "config.json"))
    tok = {k: v for k, v in read_json(args.run_dir / "tokenizer_config.json").items()
           if k not in RUN_ONLY_TOKENIZER_KEYS}
    for name in COPIED:
        if not (args.run_dir / name).is_file():
            sys.exit(f"ship_model: {args.run_dir / name} is missing")
    dest = WEIGHTS / args.name
    with tempfile.TemporaryDirectory(dir=WEIGHTS) as tmp:  # built aside, then swapped in: nothing half-written
        stage = Path(tmp) / args.name
        stage.mkdir()
        for name in COPIED:
            shutil.copy2(args.run_dir / name, stage / name)
        for name, obj in (("config.json", config), ("tokenizer_config.json", tok), ("spatialrl_model.json", record)):
            (stage / name).write_text(json.dumps(obj, indent=2) + "\n")
        old = Path(tmp) / "old"
        if dest.exists():
            dest.rename(old)
        stage.rename(dest)
    print(f"shipped {args.run_dir} as builtin:{args.name} (continued from {base_name}, "
          f"{len(record['continued'])} continuation(s) recorded)")


if __name__ == "__main__":
    main()
