"""Issue 23, newcomer 3: the visual-OOD split never silently runs on the training city."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from spatialrl.envs.registry import get_suite
from spatialrl.errors import SpatialRLError


def _opts(data, **kw):
    return {**get_suite("virl").default_options, "data": str(data), "mode": "l", **kw}


@pytest.mark.parametrize("split", ["visual-ood", "all", "in-dist,visual-ood"])
def test_visual_ood_without_visual_data_is_a_clear_error(city_data, split):
    with pytest.raises(SpatialRLError) as e:
        get_suite("virl").episodes(_opts(city_data, split=split))
    msg = str(e.value)
    assert "--set visual_data=DIR" in msg and "spatialrl virl make-city --style hillside" in msg


def test_visual_ood_uses_visual_data_and_the_same_folder_only_on_purpose(city_data, other_city_data):
    suite = get_suite("virl")
    vis = suite.episodes(_opts(city_data, split="visual-ood", visual_data=str(other_city_data)))
    assert {e.reset_options["data"] for e in vis} == {str(other_city_data)}
    same = suite.episodes(_opts(city_data, split="visual-ood", visual_data=str(city_data)))
    assert {e.reset_options["data"] for e in same} == {str(city_data)}
    assert suite.episodes(_opts(city_data, split="in-dist,rule-ood", limit=1))  # no visual_data needed


def test_eval_cli_refuses_before_creating_the_run_folder(city_data, tmp_path):
    from spatialrl.cli import app

    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["eval", "--task", "virl", "--data", str(city_data), "--split", "visual-ood",
                                   "--agent", "random", "--out", str(out), "--set", "mode=l"])
    assert res.exit_code == 2 and "visual_data" in res.output
    assert not out.exists()
