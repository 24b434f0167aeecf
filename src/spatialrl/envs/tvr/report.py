"""TVR episode pictures: the paper's qualitative figure — a top-down floor plan (start, target, final
pose, path) beside a strip of first-person frames sampled along the trajectory and the target image."""

from __future__ import annotations

import html
import io
import math
from pathlib import Path
from typing import Any

import numpy as np

from spatialrl.envs.tvr.lattice import GRID, Pose
from spatialrl.envs.tvr.scenes import load_house, render_service
from spatialrl.envs.tvr.tasks import open_bench, task_poses
from spatialrl.io import atomic_write_bytes

REPORT_FRAME_SIZE = (320, 180)
MAX_STRIP_FRAMES = 6


def floor_plan_png(house: Any, path: str | Path, start: Pose, target: Pose, poses: list[Pose] | None = None,
                   title: str = "") -> Path:
    """Draw the floor plan: reachable cells, rooms and walls, object footprints, the path, and the
    start (green), target (red) and final (blue) poses with heading arrows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    x0, z0, x1, z1 = house.bounds
    span = max(x1 - x0, z1 - z0, 1.0) + 0.6
    fig, ax = plt.subplots(figsize=(5.0 * (x1 - x0 + 0.6) / span + 1.0, 5.0 * (z1 - z0 + 0.6) / span + 1.6))
    for ix, iz in house.reachable:
        ax.add_patch(Rectangle((ix * GRID - GRID / 2, iz * GRID - GRID / 2), GRID, GRID, facecolor="#eef3f7",
                               edgecolor="#dde5ec", lw=0.4, zorder=0))
    for o in house.objects:
        (cx, _, cz), (w, _, d) = o.center, o.size
        ax.add_patch(Rectangle((cx - w / 2, cz - d / 2), w, d, facecolor="#c8a97e", alpha=0.45, edgecolor="#8a6d45",
                               lw=0.5, zorder=1))
    for r in house.rooms:
        ax.add_patch(Rectangle((r.x0, r.z0), r.x1 - r.x0, r.z1 - r.z0, fill=False, edgecolor="#888", lw=0.8,
                               ls="--", zorder=2))
        ax.text(r.x0 + 0.08, r.z1 - 0.08, r.name, fontsize=7, va="top", color="#555", zorder=5)
    for w in getattr(house, "walls", []):
        ax.add_patch(Rectangle((w.x0, w.z0), w.x1 - w.x0, w.z1 - w.z0, facecolor="#333", edgecolor="none",
                               zorder=3))
    if poses:
        xs = [p.ix * GRID for p in poses]
        zs = [p.iz * GRID for p in poses]
        ax.plot(xs, zs, "-", color="#1f6feb", lw=1.6, alpha=0.75, zorder=6)
        ax.plot(xs, zs, "o", color="#1f6feb", ms=2.5, alpha=0.75, zorder=6)
    marks = [(poses[-1], "#1f6feb", "s", "final")] if poses else []
    marks += [(start, "#2da44e", "o", "start"), (target, "#cf222e", "*", "target")]
    for pose, color, marker, label in marks:
        x, z = pose.ix * GRID, pose.iz * GRID
        ax.plot([x], [z], marker, color=color, ms=11 if marker == "*" else 8, mec="white", mew=0.8, zorder=8,
                label=f"{label} (yaw {pose.yaw}°, pitch {pose.pitch:+d}°)")
        dx, dz = math.sin(math.radians(pose.yaw)), math.cos(math.radians(pose.yaw))
        ax.annotate("", xy=(x + 0.42 * dx, z + 0.42 * dz), xytext=(x, z), zorder=9,
                    arrowprops={"arrowstyle": "-|>", "color": color, "lw": 1.8})
    ax.set_xlim(x0 - 0.3, x1 + 0.3)
    ax.set_ylim(z0 - 0.3, z1 + 0.3)
    ax.set_aspect("equal")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("z (m)")
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, framealpha=0.85)
    if title:
        ax.set_title(title, fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _caption(img: np.ndarray, text: str) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=12)
    canvas = Image.new("RGB", (img.shape[1], img.shape[0] + 18), (255, 255, 255))
    canvas.paste(Image.fromarray(img), (0, 18))
    ImageDraw.Draw(canvas).text((4, 2), text, fill=(20, 20, 20), font=font)
    return np.asarray(canvas)


def frame_strip_png(scene_id: str, path: str | Path, poses: list[Pose], target: Pose,
                    labels: list[str] | None = None, size: tuple[int, int] = REPORT_FRAME_SIZE) -> Path:
    """Re-render up to ``MAX_STRIP_FRAMES`` poses sampled evenly along ``poses`` plus the target view
    into one captioned strip."""
    from PIL import Image

    n = len(poses)
    idx = sorted(set(np.linspace(0, n - 1, min(n, MAX_STRIP_FRAMES)).round().astype(int).tolist()))
    service = render_service(*size, cache_mb=0)
    frames = service.render_raw(scene_id, [poses[i] for i in idx] + [target])
    tiles = []
    for k, i in enumerate(idx):
        note = f" {labels[i]}" if labels and i < len(labels) and labels[i] else ""
        tiles.append(_caption(frames[k], f"t={i}{note}"))
    tiles.append(_caption(frames[-1], "TARGET"))
    gap = np.full((tiles[0].shape[0], 4, 3), 255, np.uint8)
    strip = np.concatenate([x for t in tiles for x in (t, gap)][:-1], axis=1)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(strip).save(path)
    return path


def _episode_poses(episode: dict[str, Any], steps: list[dict[str, Any]], start: Pose) -> list[Pose]:
    if episode.get("poses"):
        return [Pose(*p) for p in episode["poses"]]
    return [start] + [Pose(*s["pose"]) for s in steps if s.get("pose")]


def render_episode(episode: dict[str, Any], steps: list[dict[str, Any]], options: dict[str, Any],
                   asset_dir: str | Path) -> str:
    """HTML fragment for one episode: floor plan beside the frame strip; PNGs go into ``asset_dir``
    and are referenced by file name (the report prefixes the asset folder)."""
    asset_dir = Path(asset_dir)
    task_id = str(episode.get("task_id") or episode["episode_id"])
    if "start" in episode and "target" in episode and "scene" in episode:
        scene, start, target = episode["scene"], Pose(*episode["start"]), Pose(*episode["target"])
    else:
        if not options.get("data"):
            return f"<p>No poses recorded for {html.escape(task_id)}.</p>"
        task = open_bench(options["data"]).task(task_id, options.get("split"))
        scene, (start, target) = task["scene"], task_poses(task)
    poses = _episode_poses(episode, steps, start)
    labels = [""] + [str(s.get("action")) for s in steps]
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in task_id)
    verdict = "success" if episode.get("success") else "failure"
    title = f"{task_id} · {verdict} · {len(poses) - 1} steps (optimal {episode.get('optimal_steps', '?')})"
    plan = floor_plan_png(load_house(scene), asset_dir / f"{safe}_plan.png", start, target, poses, title)
    strip = frame_strip_png(scene, asset_dir / f"{safe}_frames.png", poses, target, labels)
    return (f'<div style="display:flex;gap:12px;align-items:flex-start;flex-wrap:wrap">'
            f'<img src="{plan.name}" alt="floor plan of {html.escape(task_id)}" style="max-width:420px">'
            f'<img src="{strip.name}" alt="frames of {html.escape(task_id)}" style="max-width:100%"></div>')


def show_task_png(bench: str | Path, task_id: str, out: str | Path, width: int = 640, height: int = 360) -> Path:
    """One picture of a task: start and target views (badged as the agent sees them) over the floor plan."""
    from PIL import Image

    task = open_bench(bench).task(task_id)
    start, target = task_poses(task)
    service = render_service(width, height, cache_mb=0)
    start_img = service.frame(task["scene"], start, "CURRENT")
    target_img = service.frame(task["scene"], target, "TARGET")
    out = Path(out)
    plan_path = out.with_name(out.stem + ".plan.tmp.png")
    title = (f"{task_id} · {task['category']} · seg {task['seg_count']} · bfs {task['bfs_distance']} · "
             f"optimal {task['optimal_steps']} steps")
    floor_plan_png(load_house(task["scene"]), plan_path, start, target, None, title)
    try:
        plan = Image.open(plan_path).convert("RGB")
        plan.load()
    finally:
        plan_path.unlink(missing_ok=True)
    top = np.concatenate([start_img, np.full((height, 8, 3), 255, np.uint8), target_img], axis=1)
    w = max(top.shape[1], plan.width)
    canvas = Image.new("RGB", (w, top.shape[0] + 8 + plan.height), (255, 255, 255))
    canvas.paste(Image.fromarray(top), ((w - top.shape[1]) // 2, 0))
    canvas.paste(plan, ((w - plan.width) // 2, top.shape[0] + 8))
    buf = io.BytesIO()
    canvas.save(buf, format="PNG")
    atomic_write_bytes(out, buf.getvalue())
    return out
