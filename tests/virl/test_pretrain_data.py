"""V-IRL visual pretraining data (envs/virl/pretrain.py, `spatialrl virl pretrain-data`): labels, pixels, format."""

from __future__ import annotations

import json
import math
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spatialrl.envs.virl.cli import app
from spatialrl.envs.virl.env import VirlEnv
from spatialrl.envs.virl.pixels import view_headings
from spatialrl.envs.virl.pretrain import (
    OBSERVATION_BLOCK,
    QUESTION,
    VIEWS,
    plan_items,
    pretrain_meta,
    pretrain_options,
    pretrain_samples,
)
from spatialrl.envs.virl.prompts import PROMPT_VL
from spatialrl.envs.virl.rail import STOP, route_geometry
from spatialrl.envs.virl.validate import load_dataset
from spatialrl.errors import DataError
from spatialrl.io import write_sft_samples
from spatialrl.train.data import SFTDataset

GRID = 112


@pytest.fixture(scope="module")
def city(tmp_path_factory) -> Path:
    """A small generated city: 6 routes, small panoramas."""
    from spatialrl.envs.virl.city import make_city

    return make_city("metro", 6, 5, tmp_path_factory.mktemp("virl_pretrain") / "metro", tiny=True, pano_width=256,
                     contact_sheet=False, progress=False)


def build(city: Path, out: Path, pairs: int = 48, seed: int = 0, kinds=("destination_here", "which_view"),
          **options) -> dict:
    opts = {"grid_size": GRID, **options}
    return write_sft_samples(out, pretrain_samples(city, pairs, seed, kinds, opts),
                             pretrain_meta(city, pairs, seed, kinds, opts))


@pytest.fixture(scope="module")
def data(city, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pretrain") / "data"
    build(city, out, pairs=48, seed=3)
    return out


@pytest.fixture(scope="module")
def world(city):
    """The city's world, rebuilt here with the generator's own API (independently of envs/virl/signs.py)."""
    from spatialrl.worlds.city.geometry import build_meshes
    from spatialrl.worlds.city.panorama import PanoramaRenderer
    from spatialrl.worlds.city.visibility import SignVisibility
    from spatialrl.worlds.city.world import build_city
    from spatialrl.worlds.city.writer import pano_id

    manifest = json.loads((city / "city.json").read_text())
    c = build_city(manifest["style"], manifest["seed"], manifest["tiny"])
    meshes = build_meshes(c)
    with PanoramaRenderer(c, meshes) as renderer:
        yield {"city": c, "signs": meshes.signs, "panos": {pano_id(c, p): p for p in range(len(c.panos))},
               "places": {p.name: p for p in c.places},
               "visible": SignVisibility(c, meshes.signs, confirm=renderer.sign_pixels).visible}


def answer(row: dict) -> str:
    return row["messages"][-1]["content"][0]["text"]


def test_layout_is_the_prompts_and_answers_are_short(data):
    assert VIEWS == ("front", "right", "back", "left")  # the prompt's tile names, grid order
    assert OBSERVATION_BLOCK in PROMPT_VL and "[front, right\n back, left]" in OBSERVATION_BLOCK
    for row in SFTDataset.rows_of(data):
        user, assistant = row["messages"]
        assert [user["role"], assistant["role"]] == ["user", "assistant"]
        assert [p["type"] for p in user["content"]] == ["image", "text"]  # V-IRL's layout: the grid first
        kind = row["category"].split("-")[0]
        assert user["content"][1]["text"] == OBSERVATION_BLOCK + "\n" + QUESTION[kind].format(name=row["place"])
        assert answer(row) in (("yes", "no") if kind == "destination_here" else VIEWS)
        assert row["category"] == f"{kind}-{row['category'].split('-', 1)[1]}"


def test_label_balance(data):
    counts = Counter(r["category"] for r in SFTDataset.rows_of(data))
    assert counts == {"destination_here-destination": 12, "destination_here-approach": 4, "destination_here-route": 4,
                      "destination_here-other_destination": 4, "which_view-front": 6, "which_view-right": 6,
                      "which_view-back": 6, "which_view-left": 6}
    answers = Counter(answer(r) for r in SFTDataset.rows_of(data) if r["category"].startswith("destination_here"))
    assert answers == {"yes": 12, "no": 12}


def test_destination_labels_are_the_envs_stop_rule(city, data, world):
    """yes exactly where the env's expert answers stop(); each no class where the docs say it is."""
    dataset = load_dataset(city)
    names = [r.dest_name for r in dataset.routes]
    ends = [dataset.panos.pano_id(route_geometry(dataset, r).segments[-1].end) for r in range(len(names))]
    for row in SFTDataset.rows_of(data):
        if not row["category"].startswith("destination_here"):
            continue
        pose, cls = row["pose"], row["category"].split("-", 1)[1]
        route = names.index(row["place"])
        last = route_geometry(dataset, route).segments[-1]
        approach = {dataset.panos.pano_id(c) for c in last.candidates if c is not None}
        if cls == "destination":
            assert pose["route"] == route and pose["kind"] == "destination" and pose["pano_id"] == ends[route]
            assert pose["heading"] == dataset.routes[route].milestones[-1].heading_deg
            # the generator's rule: the destination's sign is visible there
            assert world["visible"](world["places"][row["place"]], world["panos"][pose["pano_id"]], pose["heading"])
        elif cls == "approach":
            assert pose["route"] == route and pose["kind"] == "forward" and pose["pano_id"] in approach
        elif cls == "route":
            assert pose["route"] == route and pose["kind"] != "destination"
            assert pose["pano_id"] not in approach | {ends[route]}
        else:
            assert pose["kind"] == "destination" and names[pose["route"]] != row["place"]
            assert pose["pano_id"] == ends[pose["route"]] != ends[route]


def test_grids_are_the_envs_observations_at_the_destination(city, data):
    """Play two routes with the expert: where the env wants stop(), it shows the yes sample's grid."""
    dataset = SFTDataset(data)
    yes = {row["pose"]["route"]: i for i, row in enumerate(dataset.rows) if answer(row) == "yes"}
    env = VirlEnv(city, grid_size=GRID, cache_mb=0)
    for route in sorted(yes)[:2]:
        obs, info = env.reset(options={"route_idx": route})
        while info["gt_action"] != STOP:
            obs, _, _, _, info = env.step(info["expert_response"])
        row = dataset.rows[yes[route]]
        assert env.view["pano_id"] == row["pose"]["pano_id"] and env.view["heading"] == row["pose"]["heading"]
        assert np.array_equal(obs, dataset[yes[route]]["messages"][0]["content"][0]["image"])  # PNG is lossless


@pytest.mark.parametrize("rail_mode", ["faithful", "fixed"])
def test_which_view_labels_match_the_signs(city, world, rail_mode, tmp_path):
    """The named place's sign is visible by the generator's rule, and one of its faces is centred within
    the labelled view's 90° (plus a small margin): an independent look."""
    from spatialrl.worlds.city.graph import heading_of

    out = tmp_path / rail_mode
    build(city, out, pairs=16, seed=1, kinds=("which_view",), rail_mode=rail_mode, grid_size=64)
    rows = [r for r in SFTDataset.rows_of(out) if r["category"].startswith("which_view")]
    assert Counter(answer(r) for r in rows) == {v: 4 for v in VIEWS}
    for row in rows:
        place, pano = world["places"][row["place"]], world["panos"][row["pose"]["pano_id"]]
        heading = row["pose"]["heading"]
        if rail_mode == "faithful":  # the generator's cameras are the reference layout's
            assert world["visible"](place, pano, heading)
        tile = view_headings(heading, prompt_order=rail_mode == "fixed")[VIEWS.index(answer(row))]
        bearings = [float(heading_of(s.corners.mean(0)[[0, 2]] - world["city"].panos.xz[pano]))
                    for s in world["signs"] if s.place == place.index]
        off = min(abs((b - tile + 180.0) % 360.0 - 180.0) for b in bearings)
        assert off < 45.0 + 5.0, (row["place"], answer(row), off)


def test_deterministic_by_seed(city, data, tmp_path):
    again = tmp_path / "again"
    build(city, again, pairs=48, seed=3)
    assert (again / "samples.jsonl").read_bytes() == (data / "samples.jsonl").read_bytes()
    assert sorted(p.name for p in (again / "images").iterdir()) == sorted(p.name for p in (data / "images").iterdir())
    dataset, opts = load_dataset(city), pretrain_options({})
    kinds = ("destination_here",)
    assert plan_items(dataset, 24, 4, kinds, opts) == plan_items(dataset, 24, 4, kinds, opts)
    assert plan_items(dataset, 24, 5, kinds, opts) != plan_items(dataset, 24, 4, kinds, opts)


def test_clear_errors(city, golden_data, tmp_path):
    for options, match in (({"width": 640}, "unknown option.*width"), ({"grid_size": 8}, "grid_size=8"),
                           ({"rail_mode": "sideways"}, "rail_mode 'sideways'"), ({"cache_mb": -1}, "cache_mb")):
        with pytest.raises(DataError, match=match):
            list(pretrain_samples(city, 4, 0, options=options))
    with pytest.raises(DataError, match="--pairs"):
        list(pretrain_samples(city, 0, 0))
    # a dataset that is not a generated city has no sign geometry: which_view says so; destination_here works
    with pytest.raises(DataError, match="city.json"):
        list(pretrain_samples(golden_data, 4, 0, ("which_view",), {"grid_size": 32}))
    assert len(list(pretrain_samples(golden_data, 4, 0, ("destination_here",), {"grid_size": 32}))) == 4
    # a city.json that does not rebuild the written city is refused, not trusted
    moved = tmp_path / "moved"
    shutil.copytree(city, moved)
    manifest = json.loads((moved / "city.json").read_text())
    (moved / "city.json").write_text(json.dumps({**manifest, "seed": manifest["seed"] + 1}))
    with pytest.raises(DataError, match="not the one this dataset was written from"):
        list(pretrain_samples(moved, 4, 0, ("which_view",), {"grid_size": 32}))
    res = CliRunner().invoke(app, ["pretrain-data", "--data", str(city), "--out", str(tmp_path / "x"), "--pairs", "4",
                                   "--kinds", "destination_here,stop"])
    assert res.exit_code == 2 and "--kinds" in res.output and not (tmp_path / "x").exists()


def test_cli_writes_the_dataset(city, tmp_path):
    out = tmp_path / "cli"
    res = CliRunner().invoke(app, ["pretrain-data", "--data", str(city), "--out", str(out), "--pairs", "6",
                                   "--seed", "2", "--kinds", "destination_here", "--set", "grid_size=48"])
    assert res.exit_code == 0, res.output
    meta = json.loads((out / "meta.json").read_text())
    assert meta["format"] == "spatialrl-sft/1" and meta["task"] == "virl" and meta["samples"] == 6
    assert meta["options"]["grid_size"] == 48 and meta["pretrain"]["kinds"] == ["destination_here"]
    assert SFTDataset(out)[0]["messages"][0]["content"][0]["image"].shape == (48, 48, 3)
    res = CliRunner().invoke(app, ["pretrain-data", "--data", str(city), "--out", str(out), "--pairs", "6"])
    assert res.exit_code == 2 and "not empty" in res.output


def test_merges_with_expert_data_and_trains(city, data, tmp_path):
    """`spatialrl data merge` joins the pairs with V-IRL expert SFT data, and the trainers' loader and
    tensor engine take the result (two updates of the tiny built-in model)."""
    from spatialrl.envs.registry import get_suite
    from spatialrl.models.builtin import init_model
    from spatialrl.train.common import reset_accelerate_state
    from spatialrl.train.config import SFTConfig, load_config
    from spatialrl.train.data import build_sft_dataset, merge_sft_datasets
    from spatialrl.train.sft import train

    suite = get_suite("virl")
    expert = tmp_path / "expert"
    build_sft_dataset(suite, {**suite.default_options, "data": str(city), "grid_size": GRID, "cache_mb": 16},
                      expert, episodes=1, progress=False)
    meta = merge_sft_datasets([data, expert], tmp_path / "merged")
    merged = SFTDataset(tmp_path / "merged")
    assert len(merged) == meta["samples"] == len(SFTDataset(data)) + len(SFTDataset(expert))
    assert merged[0]["messages"][0]["content"][0]["image"].shape == (GRID, GRID, 3)
    init_model("tiny", tmp_path / "tiny", seed=0)
    cfg = load_config(SFTConfig, None, {
        "output_dir": str(tmp_path / "run"), "data.train": str(tmp_path / "merged"), "data.engine": "tensor",
        "model.path": str(tmp_path / "tiny"), "max_steps": 2, "per_device_batch_size": 4, "grad_accum": 1,
        "optim.warmup_ratio": 0.0, "logging.every": 1, "logging.report_to": "none", "checkpoint.resume": "never"})
    try:
        summary = train(cfg)
    finally:
        reset_accelerate_state()  # accelerate's state is a process-wide singleton
    assert summary["finished"] and summary["step"] == 2
    losses = [json.loads(line).get("train/loss") for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x for x in losses if x is not None] and all(math.isfinite(x) for x in losses if x is not None)
