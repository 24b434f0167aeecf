"""Move rules of the TVR lattice, checked against trigonometry and hand-made layouts."""

import math

import pytest

from spatialrl.envs.tvr.lattice import ACTIONS, YAWS, Lattice, Pose, action_kind, heading_towards, snap_yaw

OPEN = [(x, z) for x in range(-3, 4) for z in range(-3, 4)]  # 7x7 open room around the origin


def trig_delta(yaw_deg: float) -> tuple[int, int]:
    """Cell step of looking along yaw (AI2-THOR: 0 = +z, 90 = +x), from sin/cos rather than a table."""
    r = math.radians(yaw_deg)
    return round(math.sin(r) * 1.0001), round(math.cos(r) * 1.0001)


@pytest.mark.parametrize("yaw", YAWS)
def test_every_heading_moves_to_the_neighbour_in_the_agent_frame(yaw):
    lat = Lattice(OPEN)
    here = Pose(0, 0, yaw, 0)
    expected = {
        "MoveAhead": trig_delta(yaw),
        "MoveBack": trig_delta(yaw + 180),
        "MoveLeft": trig_delta(yaw - 90),
        "MoveRight": trig_delta(yaw + 90),
    }
    for action, (dx, dz) in expected.items():
        new, ok = lat.step(here, action)
        assert ok
        assert (new.ix, new.iz) == (dx, dz), (yaw, action)
        assert (new.yaw, new.pitch) == (yaw, 0)
        length = math.hypot(dx, dz) * 0.25
        assert length == pytest.approx(0.354 if yaw % 90 else 0.25, abs=1e-3)


def test_rotations_wrap_and_looks_stop_at_the_limits():
    lat = Lattice(OPEN)
    assert lat.step(Pose(0, 0, 315, 0), "RotateRight") == (Pose(0, 0, 0, 0), True)
    assert lat.step(Pose(0, 0, 0, 0), "RotateLeft") == (Pose(0, 0, 315, 0), True)
    assert lat.step(Pose(0, 0, 0, 0), "LookUp") == (Pose(0, 0, 0, -30), True)  # negative = up
    assert lat.step(Pose(0, 0, 0, 0), "LookDown") == (Pose(0, 0, 0, 30), True)
    assert lat.step(Pose(0, 0, 0, -30), "LookUp") == (Pose(0, 0, 0, -30), False)
    assert lat.step(Pose(0, 0, 0, 30), "LookDown") == (Pose(0, 0, 0, 30), False)
    assert lat.step(Pose(1, 2, 45, 30), "Stop") == (Pose(1, 2, 45, 30), True)


def test_blocked_moves_leave_the_pose_unchanged_and_diagonals_only_check_the_destination():
    corridor = [(0, 0), (0, 1), (0, 2), (1, 3)]  # (1, 3) touches the corridor only diagonally
    lat = Lattice(corridor)
    assert lat.step(Pose(0, 0, 0, 0), "MoveBack") == (Pose(0, 0, 0, 0), False)
    assert lat.step(Pose(0, 0, 0, 0), "MoveLeft") == (Pose(0, 0, 0, 0), False)
    assert lat.step(Pose(0, 0, 0, 0), "MoveAhead") == (Pose(0, 1, 0, 0), True)
    # diagonal squeeze past the corner (0, 3)/(1, 2), neither reachable: allowed, as in TVRBench
    assert lat.step(Pose(0, 2, 45, 0), "MoveAhead") == (Pose(1, 3, 45, 0), True)
    assert lat.step(Pose(0, 2, 0, 0), "MoveAhead") == (Pose(0, 2, 0, 0), False)


def test_valid_actions_are_the_succeeding_ones_in_canonical_order():
    lat = Lattice([(0, 0), (0, 1), (1, 0)])
    assert lat.valid_actions(Pose(0, 0, 0, -30)) == ["MoveAhead", "MoveRight", "RotateRight", "RotateLeft",
                                                       "LookDown", "Stop"]
    assert lat.valid_actions(Pose(0, 1, 180, 30)) == ["MoveAhead", "RotateRight", "RotateLeft", "LookUp", "Stop"]
    full = lat.valid_actions(Pose(0, 0, 0, 0))
    assert full == [a for a in ACTIONS if a in full]


def test_diagnostic_modes_restrict_the_action_set():
    rot = Lattice(OPEN, mode="rotate_only")
    assert rot.step(Pose(0, 0, 0, 0), "MoveAhead") == (Pose(0, 0, 0, 0), False)
    assert rot.step(Pose(0, 0, 0, 0), "RotateRight")[1]
    assert rot.valid_actions(Pose(0, 0, 0, 0)) == ["RotateRight", "RotateLeft", "LookUp", "LookDown", "Stop"]
    mv = Lattice(OPEN, mode="move_only")
    assert mv.step(Pose(0, 0, 0, 0), "RotateLeft") == (Pose(0, 0, 0, 0), False)
    assert mv.step(Pose(0, 0, 0, 0), "LookUp") == (Pose(0, 0, 0, 0), False)
    assert mv.valid_actions(Pose(0, 0, 0, 0)) == ["MoveAhead", "MoveBack", "MoveLeft", "MoveRight", "Stop"]
    with pytest.raises(ValueError, match="unknown mode"):
        Lattice(OPEN, mode="fly")


def test_bad_inputs_are_rejected():
    lat = Lattice(OPEN)
    with pytest.raises(ValueError, match="unknown action"):
        lat.step(Pose(0, 0, 0, 0), "Jump")
    with pytest.raises(ValueError, match="at least one"):
        Lattice([])
    with pytest.raises(ValueError):
        action_kind("Fly")


def test_state_numbering_round_trips_and_table_matches_step():
    lat = Lattice([(0, 0), (1, 0), (1, 1)])
    table = lat.transition_table()
    assert table.shape == (3 * 24, 8)
    for s in range(lat.n_states):
        pose = lat.pose_of(s)
        assert lat.state_id(pose) == s
        for a, action in enumerate(ACTIONS[:-1]):
            assert lat.pose_of(table[s, a]) == lat.step(pose, action)[0]


def test_heading_helpers():
    assert heading_towards((0, 0), (0, 1)) == pytest.approx(0)
    assert heading_towards((0, 0), (1, 0)) == pytest.approx(90)
    assert heading_towards((0, 0), (-1, -1)) == pytest.approx(225)
    assert snap_yaw(22.4) == 0 and snap_yaw(22.6) == 45 and snap_yaw(350) == 0 and snap_yaw(-44) == 315
    assert [action_kind(a) for a in ("MoveLeft", "RotateLeft", "LookUp", "Stop", None)] == [
        "translation", "rotation", "look", "stop", "invalid"]
