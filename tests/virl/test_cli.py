"""`spatialrl virl ...` commands on small generated datasets."""

from __future__ import annotations

import shutil

from typer.testing import CliRunner

from spatialrl.envs.virl.cli import app
from spatialrl.envs.virl.validate import check_dataset

runner = CliRunner()


def test_check_data_ok_and_problems(golden_data, tmp_path):
    res = runner.invoke(app, ["check-data", str(golden_data)])
    assert res.exit_code == 0, res.output
    assert "4 routes" in res.output and "49 panoramas" in res.output
    broken = shutil.copytree(golden_data, tmp_path / "broken")
    for jpg in sorted((broken / "street_views").glob("*.jpg"))[:2]:
        jpg.unlink()
    res = runner.invoke(app, ["check-data", str(broken)])
    assert res.exit_code == 1
    assert "2 problem(s)" in res.output and res.output.count(".jpg is missing") == 2
    assert runner.invoke(app, ["check-data", str(broken), "--language-only"]).exit_code == 0


def test_show_route_prints_the_rail_and_draws_it(golden_data, tmp_path):
    png = tmp_path / "route.png"
    res = runner.invoke(app, ["show-route", str(golden_data), "--route", "1", "--relative", "--heading", "350.5",
                              "--out", str(png), "--point", "3"])
    assert res.exit_code == 0, res.output
    assert "1. First, turn slightly left to face north.\n" in res.output
    assert "3. Turn left to face north.\n" in res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fixed = runner.invoke(app, ["show-route", str(golden_data), "--route", "1", "--rail-mode", "fixed"])
    assert "3. Turn slightly right to face north." in fixed.output
    assert runner.invoke(app, ["show-route", str(golden_data), "--route", "9"]).exit_code == 2


def test_make_toy_data_writes_a_valid_dataset(tmp_path):
    out = tmp_path / "toy"
    res = runner.invoke(app, ["make-toy-data", str(out), "--routes", "5", "--pano-width", "64"])
    assert res.exit_code == 0, res.output
    assert check_dataset(out) == []
    assert runner.invoke(app, ["make-toy-data", str(out)]).exit_code == 2  # refuses to overwrite


def test_check_data_says_which_panoramas_it_checked(golden_data, tmp_path):
    """Issue 23, fault 11: check-data used to print "ok ... N panoramas" having checked only those a rail
    reaches. It now says what it checked, --all-panoramas checks the rest, and eval's check agrees."""
    import pickle

    import pytest

    from spatialrl.envs.virl.validate import check_report, load_dataset
    from spatialrl.errors import DataError

    data = shutil.copytree(golden_data, tmp_path / "extra")
    mapping = pickle.loads((data / "gps_pano_mapping.pkl").read_bytes())
    lat, lng = next(iter(mapping))
    mapping[(lat + 0.05, lng)] = "unreached_pano"  # ~5.5 km away, no image: no rail point relocates to it
    (data / "gps_pano_mapping.pkl").write_bytes(pickle.dumps(mapping))
    report = check_report(data)
    total = len(set(mapping.values()))
    assert report.panoramas == total and report.checked == report.reachable < total and not report.problems

    res = runner.invoke(app, ["check-data", str(data)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert f"{total} panoramas in the mapping" in text
    assert f"checked the {report.reachable} panoramas the rails reach (image decoded, metadata read)" in text
    assert f"the other {total - report.reachable} in gps_pano_mapping.pkl" in text and "not checked" in text
    load_dataset(data)  # eval's up-front check looks at the same panoramas: it passes too

    res = runner.invoke(app, ["check-data", str(data), "--all-panoramas"])
    text = " ".join(res.output.split())
    assert res.exit_code == 1 and "2 problem(s)" in text  # its image and its metadata
    assert "pano 'unreached_pano' (in gps_pano_mapping.pkl; no rail reaches it): street_views/unreached_pano.jpg is missing" in text
    assert f"all {total} panoramas checked" in text

    # a missing image a rail reaches: both checks report it, and say what they checked
    reached = sorted((data / "street_views").glob("*.jpg"))[0]
    reached.unlink()
    res = runner.invoke(app, ["check-data", str(data)])
    assert res.exit_code == 1 and f"checked the {report.reachable} panoramas the rails reach" in " ".join(res.output.split())
    with pytest.raises(DataError, match=f"checked the {report.reachable} panoramas the rails reach "
                                        r"\(image file present, metadata read\)"):
        load_dataset(data)
