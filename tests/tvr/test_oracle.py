"""The BFS oracle against an independent brute force on small hand-made layouts."""

import itertools
import math

import pytest

from spatialrl.envs.tvr import oracle
from spatialrl.envs.tvr.lattice import Lattice, Pose

L_SHAPE = [(0, z) for z in range(4)] + [(x, 3) for x in range(1, 4)]
PILLAR = [(x, z) for x in range(4) for z in range(4) if (x, z) not in {(1, 1), (2, 1), (1, 2)}]
SQUEEZE = [(0, 0), (0, 1), (1, 2), (1, 3)]  # the halves touch only diagonally


def brute_force_steps(cells, start, target, max_len=5):
    """Shortest action count by trying every sequence of length 0, 1, 2, ... with a move rule written
    here from trigonometry (not the lattice code). Stop is not counted here."""
    cells = set(cells)

    def step(p, a):
        ix, iz, yaw, pitch = p
        if a in ("RotateRight", "RotateLeft"):
            return (ix, iz, (yaw + (45 if a == "RotateRight" else -45)) % 360, pitch)
        if a in ("LookUp", "LookDown"):
            np_ = pitch + (-30 if a == "LookUp" else 30)
            return (ix, iz, yaw, np_) if -30 <= np_ <= 30 else p
        heading = yaw + {"MoveAhead": 0, "MoveRight": 90, "MoveBack": 180, "MoveLeft": 270}[a]
        r = math.radians(heading)
        nb = (ix + round(math.sin(r) * 1.0001), iz + round(math.cos(r) * 1.0001))
        return (nb[0], nb[1], yaw, pitch) if nb in cells else p

    actions = ["MoveAhead", "MoveBack", "MoveLeft", "MoveRight", "RotateRight", "RotateLeft", "LookUp", "LookDown"]
    for n in range(max_len + 1):
        for seq in itertools.product(actions, repeat=n):
            p = tuple(start)
            for a in seq:
                p = step(p, a)
            if p == tuple(target):
                return n
    return None


CASES = [
    (L_SHAPE, Pose(0, 0, 0, 0), Pose(2, 3, 0, 0)),
    (L_SHAPE, Pose(0, 1, 180, 30), Pose(1, 3, 90, 0)),
    (PILLAR, Pose(0, 0, 0, 0), Pose(2, 2, 45, 0)),
    (PILLAR, Pose(2, 0, 0, 0), Pose(2, 3, 0, 0)),  # detour round the pillar
    (SQUEEZE, Pose(0, 0, 0, 0), Pose(1, 3, 0, 0)),
    (SQUEEZE, Pose(1, 3, 180, 0), Pose(0, 0, 180, 0)),
    ([(0, 0)], Pose(0, 0, 0, -30), Pose(0, 0, 225, 30)),  # turns the short way round
]


@pytest.mark.parametrize("cells,start,target", CASES)
def test_oracle_matches_brute_force(cells, start, target):
    lat = Lattice(cells)
    expected = brute_force_steps(cells, start, target)
    assert expected is not None
    assert oracle.optimal_steps(lat, start, target) == expected + 1  # + the Stop
    plan = oracle.expert_actions(lat, start, target)
    assert len(plan) == expected + 1 and plan[-1] == "Stop"
    pose = start
    for a in plan[:-1]:
        pose, ok = lat.step(pose, a)
        assert ok
    assert pose == target


def test_next_action_is_optimal_from_every_state():
    lat = Lattice(PILLAR)
    target = Pose(3, 3, 135, -30)
    dist = oracle.distances_to(lat, target)
    assert (dist >= 0).all()  # the layout is connected
    for s in range(lat.n_states):
        pose = lat.pose_of(s)
        a = oracle.next_action(lat, pose, dist)
        if pose == target:
            assert a == "Stop"
            continue
        nxt, ok = lat.step(pose, a)
        assert ok and dist[lat.state_id(nxt)] == dist[s] - 1


def test_unreachable_targets_are_reported():
    lat = Lattice([(0, 0), (5, 5)])
    dist = oracle.distances_to(lat, Pose(5, 5, 0, 0))
    assert dist[lat.state_id(Pose(0, 0, 0, 0))] == oracle.UNREACHABLE
    with pytest.raises(ValueError, match="cannot be reached"):
        oracle.optimal_steps(lat, Pose(0, 0, 0, 0), Pose(5, 5, 0, 0))


def test_mode_restricted_oracle_uses_only_allowed_actions():
    room = [(x, z) for x in range(4) for z in range(4)]
    start, target = Pose(0, 0, 0, 0), Pose(3, 3, 0, 0)
    free = oracle.optimal_steps(Lattice(room), start, target)
    moves_only = oracle.optimal_steps(Lattice(room, "move_only"), start, target)
    assert free == 1 + 5  # RotateRight, 3 diagonal moves, RotateLeft
    assert moves_only == 1 + 6  # 3 ahead + 3 right
    assert set(oracle.expert_actions(Lattice(room, "move_only"), start, target)) <= {
        "MoveAhead", "MoveBack", "MoveLeft", "MoveRight", "Stop"}


def test_grid_bfs_distance_counts_positions_only_4_connected():
    d = oracle.grid_bfs_distance(set(PILLAR), (0, 0))
    assert d[(2, 2)] == 6 and d[(1, 3)] == 4 and d[(3, 3)] == 6 and d[(3, 1)] == 4
    d2 = oracle.grid_bfs_distance(set(SQUEEZE), (0, 0))
    assert (1, 2) not in d2  # diagonal contact is not a 4-connected path


def test_geodesic_metres_follow_the_lattice():
    lat = Lattice(SQUEEZE)
    g = oracle.geodesic_metres(lat, (0, 0))
    assert g[(0, 1)] == pytest.approx(0.25)
    assert g[(1, 2)] == pytest.approx(0.25 + 0.25 * math.sqrt(2))
    wall = [(x, z) for x in range(5) for z in range(3) if not (x == 2 and z < 2)]
    g2 = oracle.geodesic_metres(Lattice(wall), (0, 0))
    assert g2[(4, 0)] > 1.0 + 1e-6  # must detour around the wall, longer than the straight 1.0 m


@pytest.mark.parametrize("tie_break", sorted(oracle.TIE_BREAKS))
def test_every_tie_break_stays_optimal_and_ranks_as_documented(tie_break):
    lat = Lattice(PILLAR)
    target = Pose(3, 3, 135, -30)
    dist = oracle.distances_to(lat, target)
    rank = {a: oracle.TIE_BREAKS[tie_break].index(i) for i, a in enumerate(oracle.ACTIONS) if a != "Stop"}
    ties = 0
    for s in range(lat.n_states):
        pose = lat.pose_of(s)
        options = oracle.optimal_actions(lat, pose, dist)
        a = oracle.next_action(lat, pose, dist, tie_break)
        assert a in options
        if pose != target:
            nxt, ok = lat.step(pose, a)
            assert ok and dist[lat.state_id(nxt)] == dist[s] - 1  # SPL stays 1.0
            assert rank[a] == min(rank[o] for o in options)
            ties += len(options) > 1
    assert ties > 0  # the layout has ties, so the ranking was exercised


def test_look_first_turns_before_moving_where_both_are_optimal():
    lat = Lattice(PILLAR)
    target = Pose(3, 3, 135, -30)
    dist = oracle.distances_to(lat, target)
    differ = 0
    for s in range(lat.n_states):
        pose = lat.pose_of(s)
        options = oracle.optimal_actions(lat, pose, dist)
        moves = [o for o in options if o.startswith("Move")]
        turns = [o for o in options if not o.startswith("Move") and o != "Stop"]
        if moves and turns:
            assert oracle.next_action(lat, pose, dist, "look_first") in turns
            assert oracle.next_action(lat, pose, dist, "canonical") in moves
            differ += 1
    assert differ > 0
    with pytest.raises(ValueError, match="tie-break"):
        oracle.next_action(lat, lat.pose_of(0), dist, "bogus")
