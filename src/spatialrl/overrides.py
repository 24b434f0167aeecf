"""One override syntax for every command line: ``KEY=VALUE``, the value read as YAML.

Used by ``spatialrl eval``, ``spatialrl play`` and ``spatialrl data sft`` (``--set KEY=VALUE``, task
options) and by ``spatialrl train ALGO CONFIG`` (``--set a.b=VALUE``, or its shorthand ``--a.b=VALUE`` /
``--a.b VALUE``, dotted config keys; ``train/config.py`` checks the keys and types). A value is one YAML
document: ``3`` is an int, ``1e-5`` a float string the config loader reads as a float, ``true`` a bool,
``null`` None, ``[a, b]`` a list, ``{memory: ao}`` a mapping, an empty value the empty string.

Every error is a :class:`~spatialrl.errors.ConfigError` in one format, ``<flag><key>: <problem>``, e.g.
``--set memory: cannot read value '[ao': ...`` or ``--optim.lr: cannot read value ...``.
"""

from __future__ import annotations

from typing import Any

from spatialrl.errors import ConfigError

SET = "--set "  # how errors name a --set flag's key: "--set memory: ..."


def parse_value(raw: str, key: str, where: str = SET) -> Any:
    """``raw`` read as YAML (``""`` stays the empty string); ``key``/``where`` name it in the error."""
    import yaml

    if raw == "":
        return ""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as e:
        problem, mark = getattr(e, "problem", None), getattr(e, "problem_mark", None)
        where_in = f" at character {mark.column + 1}" if mark is not None and problem else ""
        raise ConfigError(f"{where}{key}: cannot read value {raw!r} as YAML: "
                          f"{problem or ' '.join(str(e).split())}{where_in}") from None


def parse_assignment(text: str, where: str = SET) -> tuple[str, Any]:
    """``"memory=ao"`` → ``("memory", "ao")``; the key is stripped and must not be empty."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"{where}{text!r}: expected KEY=VALUE (a key, '=', then the value)")
    return key, parse_value(raw, key, where)


def parse_sets(items: list[str] | None, where: str = SET) -> dict[str, Any]:
    """Repeated ``--set KEY=VALUE`` flags as a mapping (a later flag wins over an earlier one)."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, value = parse_assignment(item, where)
        out[key] = value
    return out
