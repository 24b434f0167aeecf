"""Held-out curves of the two continuations (train-metrics-*.jsonl → curves.png): image-swap gap and held-out loss
against the update. Run from this folder: python plot_curves.py"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent
ARMS = {"tvr-ao-joined": "more noisy-expert data", "tvr-ao-joined-dagger": "+ DAgger states (paused at half its budget)"}
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
for arm, label in ARMS.items():
    rows = [json.loads(line) for line in (HERE / f"train-metrics-{arm}.jsonl").read_text().splitlines()]
    held = {r["step"]: r for r in rows if "heldout/image_swap_gap" in r}  # last row per step wins
    steps = sorted(held)
    for ax, key in zip(axes, ("heldout/image_swap_gap", "heldout/loss")):
        ax.plot(steps, [held[s][key] for s in steps], marker=".", label=label)
for ax, title in zip(axes, ("held-out image-swap gap", "held-out loss")):
    ax.set_xlabel("update (x 128 samples)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
axes[0].legend()
fig.suptitle("TVR action-only (joined frames) continued from the shipped model, one H100 (2026-12-07)")
fig.tight_layout()
fig.savefig(HERE / "curves.png", dpi=110)
