"""Template reasoning for CoT SFT data: each task suite provides its own (``TaskSuite.thought``).

A task's template turns the env's ground truth at the current step into a short first-person thought
that ends in the expert's answer; :func:`spatialrl.train.data.cot_response` wraps it as
``<think>{thought}</think>\\n{answer}``. The templates live with their tasks (``envs/<task>/thoughts.py``:
TVR from the pose difference to the target view, V-IRL from the oracle observation and instruction,
GeneralPoints from the cards); this module only looks them up, so training code never names a task.
"""

from __future__ import annotations

from spatialrl.envs.registry import get_suite, task_names
from spatialrl.errors import DataError
from spatialrl.train.data import ThoughtFn


def thought_function(task: str) -> ThoughtFn:
    """The reasoning template of ``task``'s suite; a ``DataError`` naming the tasks that have one if not."""
    thought = get_suite(task).thought
    if thought is None:
        available = [name for name in task_names() if get_suite(name).thought is not None]
        raise DataError(f"--cot: no reasoning template for task {task!r}; available: {', '.join(available)}")
    return thought
