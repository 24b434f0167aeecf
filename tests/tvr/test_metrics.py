"""Every TVR metric formula on hand-made episode records with hand-computed values."""

import pytest

from spatialrl.envs.tvr.metrics import spl_term, summarize


def ep(cat, success, stopped, steps, opt, pos, yaw, pitch, invalid, cells, rev, counts, tokens=None):
    r = {"category": cat, "success": success, "stopped": stopped, "steps": steps, "optimal_steps": opt,
         "final_pos_error": pos, "final_yaw_error": yaw, "final_pitch_error": pitch, "invalid_actions": invalid,
         "distinct_cells": cells, "revisits": rev, "action_counts": counts}
    if tokens is not None:
        r["response_tokens"] = tokens
    return r


RECORDS = [
    # success in 8 steps with optimal 6 -> SPL 0.75
    ep("single-easy", True, True, 8, 6, 0.0, 0.0, 0.0, 0, 4, 0,
       {"translation": 4, "rotation": 2, "look": 1, "stop": 1, "invalid": 0}, tokens=40),
    # false stop
    ep("single-easy", False, True, 3, 5, 0.5, 90.0, 30.0, 1, 2, 1,
       {"translation": 1, "rotation": 0, "look": 0, "stop": 1, "invalid": 1}, tokens=30),
    # out of budget (not stopped)
    ep("multi-hard", False, False, 40, 18, 1.25, 45.0, 60.0, 2, 7, 5,
       {"translation": 10, "rotation": 20, "look": 8, "stop": 0, "invalid": 2}, tokens=200),
    # success faster than "optimal" can't happen, but SPL must still clamp to 1
    ep("multi-hard", True, True, 10, 12, 0.0, 0.0, 0.0, 0, 5, 0,
       {"translation": 6, "rotation": 3, "look": 0, "stop": 1, "invalid": 0}, tokens=50),
]


def test_spl_term():
    assert spl_term(True, 8, 6) == pytest.approx(0.75)
    assert spl_term(True, 6, 6) == 1.0
    assert spl_term(True, 4, 6) == 1.0
    assert spl_term(False, 6, 6) == 0.0


def test_overall_metrics_by_hand():
    m = summarize(RECORDS)["overall"]
    assert m["n"] == 4
    assert m["success_rate"] == pytest.approx(2 / 4)
    assert m["spl"] == pytest.approx((0.75 + 0 + 0 + 1.0) / 4)
    assert m["mean_steps"] == pytest.approx((8 + 3 + 40 + 10) / 4)
    assert m["stop_rate"] == pytest.approx(3 / 4)
    assert m["fstop_given_stop"] == pytest.approx((3 - 2) / 3)
    assert m["fstop_all"] == pytest.approx((3 - 2) / 4)
    assert m["final_pos_error_m"] == pytest.approx((0 + 0.5 + 1.25 + 0) / 4)
    assert m["final_yaw_error_deg"] == pytest.approx((0 + 90 + 45 + 0) / 4)
    assert m["final_pitch_error_deg"] == pytest.approx((0 + 30 + 60 + 0) / 4)
    assert m["invalid_per_episode"] == pytest.approx(3 / 4)
    assert m["distinct_cells"] == pytest.approx((4 + 2 + 7 + 5) / 4)
    assert m["revisits"] == pytest.approx(6 / 4)
    total = 8 + 3 + 40 + 10
    assert m["share_translation"] == pytest.approx(21 / total)
    assert m["share_rotation"] == pytest.approx(25 / total)
    assert m["share_look"] == pytest.approx(9 / total)
    assert m["share_stop"] == pytest.approx(3 / total)
    assert m["share_invalid"] == pytest.approx(3 / total)
    assert m["response_tokens_per_step"] == pytest.approx(320 / total)


def test_per_category_rows_and_undefined_fstop():
    out = summarize(RECORDS)
    assert set(out) == {"overall", "single-easy", "multi-hard"}
    se, mh = out["single-easy"], out["multi-hard"]
    assert se["success_rate"] == 0.5 and se["spl"] == pytest.approx(0.375)
    assert se["fstop_given_stop"] == pytest.approx(0.5) and se["fstop_all"] == pytest.approx(0.5)
    assert mh["stop_rate"] == 0.5 and mh["fstop_given_stop"] == 0.0
    only_timeouts = summarize([RECORDS[2]])["multi-hard"]
    assert "fstop_given_stop" not in only_timeouts  # 0/0 is left out, not reported as 0
    assert only_timeouts["fstop_all"] == 0.0


def test_error_records_count_as_failures_and_missing_tokens_are_not_invented():
    err = {"episode_id": "x", "category": "single-hard", "success": False, "n_steps": 2, "error": "boom"}
    m = summarize([err])["single-hard"]
    assert m["success_rate"] == 0.0 and m["mean_steps"] == 2.0
    assert "final_pos_error_m" not in m and "response_tokens_per_step" not in m and "spl" not in m
    assert summarize([]) == {"overall": {"n": 0}}
