"""Held-out curves of side-by-side SFT arms (a results folder's train-metrics-<arm>.jsonl → curves.png):
image-swap gap and held-out loss against the update. Run from this folder, e.g.

    python plot_curves.py tvr-joined-plan "TVR action-only from scratch, 8 min each on one H100 (2026-12-07)" \
        tvr-ao-sft="two images (control)" tvr-ao-joined="one joined image"
    python plot_curves.py tvr-joined-dagger-plan \
        "TVR action-only (joined frames) continued from the shipped model, one H100 (2026-12-07)" \
        tvr-ao-joined="more noisy-expert data" \
        tvr-ao-joined-dagger="+ DAgger states (paused at half its budget)"
    python plot_curves.py tvr-continue-r11-plan \
        "TVR joined frames continued from the shipped models, 8 min each on one H100 (2026-12-07)" \
        tvr-ao-joined="action-only, more noisy-expert data" tvr-va-joined="visual-action (whole chat), from the AO model"
"""

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="results folder holding train-metrics-<arm>.jsonl")
    ap.add_argument("title")
    ap.add_argument("arms", nargs="+", metavar="ARM=LABEL")
    args = ap.parse_args()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for arm, label in (a.split("=", 1) for a in args.arms):
        lines = (args.folder / f"train-metrics-{arm}.jsonl").read_text().splitlines()
        held = {r["step"]: r for r in map(json.loads, lines) if "heldout/image_swap_gap" in r}  # last row per step
        steps = sorted(held)
        for ax, key in zip(axes, ("heldout/image_swap_gap", "heldout/loss")):
            ax.plot(steps, [held[s][key] for s in steps], marker=".", label=label)
    for ax, title in zip(axes, ("held-out image-swap gap", "held-out loss")):
        ax.set_xlabel("update (action-only: x 128 samples; visual-action: x 8 episodes)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.folder / "curves.png", dpi=110)


if __name__ == "__main__":
    main()
