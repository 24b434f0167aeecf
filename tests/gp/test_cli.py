"""`spatialrl gp show | solve | verify`."""

from __future__ import annotations

import numpy as np
from PIL import Image
from typer.testing import CliRunner

from spatialrl.cli import app

RUN = CliRunner()


def test_solve():
    r = RUN.invoke(app, ["gp", "solve", "3", "3", "8", "8"])
    assert r.exit_code == 0 and "8/(3-8/3)=24" in r.output
    r = RUN.invoke(app, ["gp", "solve", "A", "1", "1", "1"])
    assert r.exit_code == 1 and "no way to make 24" in r.output
    r = RUN.invoke(app, ["gp", "solve", "K", "Q", "2", "2", "--rule-ood"])
    assert r.exit_code == 0 and "[13, 12, 2, 2]" in r.output
    r = RUN.invoke(app, ["gp", "solve", "1", "2", "3"])
    assert r.exit_code == 2 and "four cards" in r.output


def test_verify():
    r = RUN.invoke(app, ["gp", "verify", "1 5 5 5", "5*(5-1/5)=24"])
    assert r.exit_code == 0 and "CORRECT_SOLUTION reward +5" in r.output
    r = RUN.invoke(app, ["gp", "verify", "1,5,5,5", '{"cards": [1, 5, 5, 5], "formula": "5*5-1"}'])
    assert "INCORRECT_NUMBER reward -2" in r.output
    r = RUN.invoke(app, ["gp", "verify", "1 5 5 X", "1"])
    assert r.exit_code == 2 and "card 'X'" in r.output


def test_show_writes_the_image(tmp_path):
    out = tmp_path / "hand.png"
    r = RUN.invoke(app, ["gp", "show", "--cards", "HA S5 D5 C5", "--out", str(out), "--resolution", "200",
                         "--prompt", "--mode", "l"])
    assert r.exit_code == 0, r.output
    assert "numbers [1, 5, 5, 5]" in r.output and "Cards: ['A', '5', '5', '5']" in r.output
    assert '"formula": "' in r.output
    assert np.asarray(Image.open(out)).shape == (200, 200, 3)
    r = RUN.invoke(app, ["gp", "show", "--seed", "3", "--split", "visual-ood"])
    assert r.exit_code == 0 and all(s in "HD" for s in r.output.split("cards ")[1].split(" →")[0].split()[0][0])
    r = RUN.invoke(app, ["gp", "show", "--split", "weird"])
    assert r.exit_code == 2 and "unknown split" in r.output
