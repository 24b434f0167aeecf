"""train_builtin.sh's init_args: which weights each arm starts from (INIT, INIT_MAP), and the V-IRL (and joined TVR) arms'
pixel bound when VIRL_GRID is set."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def init_args(arm: str, tmp_path: Path, **env: str) -> str:
    script = ROOT / "scripts/gpu/train_builtin.sh"
    body = (f'source <(sed -n "/^init_args() {{/,/^}}/p; /^init_source() {{/,/^}}/p; /^frames_of() {{/,/^}}/p; '
            f'/^arm() {{/,/^}}/p" {script}); ROOT={tmp_path}; init_args {arm}; echo "${{MODEL_ARGS[@]}}"')
    return subprocess.run(["bash", "-c", body], env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_init_folder_and_map(tmp_path):
    for arm in ("tvr-ao-sft", "tvr-va-sft"):
        (tmp_path / "init" / arm).mkdir(parents=True)
        (tmp_path / "init" / arm / "config.json").write_text("{}")
    own = init_args("tvr-va-sft", tmp_path, INIT="init")
    assert own == f"--model.path={tmp_path}/init/tvr-va-sft --model.preset_overrides={{}}"
    mapped = init_args("tvr-va-sft", tmp_path, INIT="init", INIT_MAP="virl-sft=x tvr-va-sft=tvr-ao-sft")
    assert mapped == f"--model.path={tmp_path}/init/tvr-ao-sft --model.preset_overrides={{}}"
    assert init_args("virl-sft", tmp_path, INIT="init") == ""  # no folder for it: from scratch
    assert init_args("tvr-ao-pre", tmp_path, INIT="shipped") == "--model.path=builtin:tvr-ao-sft --model.preset_overrides={}"
    assert init_args("tvr-va-sft", tmp_path, INIT="shipped", INIT_MAP="tvr-va-sft=tvr-ao-pre") == \
        "--model.path=builtin:tvr-ao-sft --model.preset_overrides={}"
    assert init_args("tvr-va-sft", tmp_path) == ""  # INIT=scratch


def test_shipped_and_builtin_map_for_virl_arms(tmp_path):
    assert init_args("virl-pre", tmp_path, INIT="shipped") == "--model.path=builtin:virl-sft --model.preset_overrides={}"
    # beside INIT=.init TVR arms, a V-IRL arm can start from the shipped model
    assert init_args("virl-pre", tmp_path, INIT="init", INIT_MAP="virl-pre=builtin:virl-sft") == \
        "--model.path=builtin:virl-sft --model.preset_overrides={}"


def test_virl_grid_raises_the_virl_arms_pixel_bound(tmp_path):
    """The small preset's processor bound is 224*224: a 448-px grid would reach the model resized to 224."""
    assert init_args("virl-retry", tmp_path, INIT="shipped", VIRL_GRID="448") == \
        "--model.path=builtin:virl-sft --model.preset_overrides={} --model.max_pixels=200704"
    assert init_args("virl-sft", tmp_path, VIRL_GRID="448") == "--model.max_pixels=200704"  # from scratch too
    assert init_args("tvr-ao-sft", tmp_path, INIT="shipped", VIRL_GRID="448") == \
        "--model.path=builtin:tvr-ao-sft --model.preset_overrides={}"  # TVR arms keep theirs
    assert init_args("virl-sft", tmp_path, INIT="shipped") == "--model.path=builtin:virl-sft --model.preset_overrides={}"


def test_a_joined_tvr_arm_gets_room_for_two_frames(tmp_path):
    """tvr-ao-joined's image is two frames side by side: its bound is 2*W*H (94080 at 280x168, the GPU size),
    or the processor would shrink it back to one frame's pixels."""
    assert init_args("tvr-ao-joined", tmp_path, W="280", H="168") == "--model.max_pixels=94080"
    assert init_args("tvr-ao-joined", tmp_path, INIT="shipped", W="112", H="64") == \
        "--model.path=builtin:tvr-ao-sft --model.preset_overrides={} --model.max_pixels=14336"
    assert init_args("tvr-ao-sft", tmp_path, W="280", H="168") == ""  # one frame per image: the preset's bound
    assert init_args("tvr-ao-joined-dagger", tmp_path, W="280", H="168") == "--model.max_pixels=94080"
    # the joined VA arm continues the shipped VA model (joined frames since the twenty-first session)
    assert init_args("tvr-va-joined", tmp_path, INIT="shipped", W="280", H="168") == \
        "--model.path=builtin:tvr-va-sft --model.preset_overrides={} --model.max_pixels=94080"


def layout_matches(arm: str, init: str) -> bool:
    script = ROOT / "scripts/gpu/train_builtin.sh"
    lib = ROOT / "scripts/gpu/lib.sh"
    body = (f'source <(sed -n "/^layout_matches() {{/,/^}}/p; /^frames_of() {{/,/^}}/p; /^arm() {{/,/^}}/p" {script}); '
            f'source <(sed -n "/^model_frames() {{/,/^}}/p" {lib}); layout_matches {arm} {init}')
    return subprocess.run(["bash", "-c", body], env={"PATH": "/usr/bin:/bin", "PY": sys.executable},
                          capture_output=True, text=True).returncode == 0


def test_a_tvr_arm_continues_only_a_model_of_its_frame_layout():
    """The shipped TVR models read one joined image (2026-12-07): a two-image arm must not continue them."""
    assert not layout_matches("tvr-ao-pre", "builtin:tvr-ao-sft")  # INIT=shipped maps AO arms to tvr-ao-sft
    assert layout_matches("tvr-ao-joined", "builtin:tvr-ao-sft")
    assert layout_matches("tvr-ao-joined-dagger", "builtin:tvr-ao-sft")
    assert layout_matches("tvr-ao-joined", "builtin:tvr-va-sft")  # both shipped TVR models read joined frames
    assert not layout_matches("tvr-va-sft", "builtin:tvr-va-sft")  # the two-image VA arm
    assert not layout_matches("tvr-va-sft", "builtin:tvr-ao-sft")  # INIT_MAP tvr-va-sft=tvr-ao-sft
    assert layout_matches("tvr-va-joined", "builtin:tvr-ao-sft")
    assert layout_matches("tvr-va-joined", "builtin:tvr-va-sft")
    assert layout_matches("tvr-ao-sft", "scratch") and layout_matches("virl-sft", "builtin:tvr-ao-sft")
