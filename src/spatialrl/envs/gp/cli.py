"""`spatialrl gp ...`: look at a dealt hand, solve a hand, check a formula. Evaluation itself runs
through ``spatialrl eval --task gp`` (the suite in :mod:`spatialrl.envs.gp.suite`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spatialrl.errors import SpatialRLError

app = typer.Typer(help="GeneralPoints (24 points card game): show hands, solve, verify formulas.",
                  no_args_is_help=True)


def _numbers(values: list[str], rule_ood: bool) -> list[int]:
    """Card numbers from CLI words: integers as they are, A/J/Q/K by the chosen rule."""
    from spatialrl.envs.gp.cards import NAME_RANKS, card_value
    from spatialrl.errors import DataError

    out = []
    for word in values:
        text = word.strip().upper()
        if text.isdigit():
            out.append(int(text))
        elif text in NAME_RANKS:
            out.append(card_value(NAME_RANKS[text], face_cards_as_10=not rule_ood))
        else:
            raise DataError(f"card {word!r}: expected a number or one of A, J, Q, K")
    return out


@app.command("show")
def show_command(
    seed: Annotated[int, typer.Option(help="Seed of the deal.")] = 0,
    split: Annotated[str, typer.Option(help="in-dist | rule-ood | visual-ood | recognition")] = "in-dist",
    mode: Annotated[str, typer.Option(help="vl | l (which prompt to print)")] = "vl",
    cards: Annotated[str | None, typer.Option(help='Fixed hand instead of a deal, e.g. "HA S5 D5 C5".')] = None,
    out: Annotated[Path | None, typer.Option(help="Write the table image here (PNG).")] = None,
    resolution: Annotated[int, typer.Option(help="Image side in pixels.")] = 1200,
    prompt: Annotated[bool, typer.Option("--prompt", help="Also print the task prompt.")] = False,
) -> None:
    """Deal a hand (or take --cards) and print it with the expert's answer; optionally save the image."""
    from rich.console import Console

    from spatialrl.envs.gp.env import GeneralPointsEnv
    from spatialrl.envs.gp.prompts import task_prompt

    console = Console()
    try:
        env = GeneralPointsEnv(mode=mode, split=split, resolution=resolution)
        options = {"split": split} if cards is None else {"split": split, "cards": cards}
        _, info = env.reset(seed=seed, options=options)
        console.print(f"cards {' '.join(info['cards'])} → numbers {info['numbers']} (target {info['target']}, "
                      f"{len(info['solutions'])} formulas reach it)")
        if prompt:
            console.print(task_prompt(info, mode), markup=False, highlight=False)
        console.print(info["expert_response"], markup=False, highlight=False)
        if out is not None:
            import io

            from PIL import Image

            from spatialrl.envs.gp.card_images import render_table
            from spatialrl.io import atomic_write_bytes

            buffer = io.BytesIO()
            Image.fromarray(render_table(env.hand.cards, resolution)).save(buffer, format="PNG")
            atomic_write_bytes(out, buffer.getvalue())
            console.print(f"image → {out}")
    except SpatialRLError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None


@app.command("solve")
def solve_command(
    cards: Annotated[list[str], typer.Argument(help="Four card numbers (or A/J/Q/K), e.g. 1 5 5 5.")],
    target: Annotated[int, typer.Option(help="The number to make.")] = 24,
    rule_ood: Annotated[bool, typer.Option("--rule-ood", help="J/Q/K count as 11/12/13 instead of 10.")] = False,
    show: Annotated[int, typer.Option(help="How many formulas to print (0 = all).")] = 10,
) -> None:
    """Print the formulas (in the reference's written form) that make the target."""
    from rich.console import Console

    from spatialrl.envs.gp.solver import solutions

    console = Console()
    try:
        numbers = _numbers(cards, rule_ood)
        if len(numbers) != 4:
            raise SpatialRLError(f"need four cards, got {len(numbers)}")
        found = solutions(numbers, target)
        if not found:
            console.print(f"{numbers}: no way to make {target}")
            raise typer.Exit(1)
        console.print(f"{numbers}: {len(found)} formulas make {target}")
        for formula in found if show == 0 else found[:show]:
            console.print(f"  {formula}={target}", markup=False, highlight=False)
    except SpatialRLError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None


@app.command("verify")
def verify_command(
    cards: Annotated[str, typer.Argument(help='The four card numbers, e.g. "1 5 5 5" (A/J/Q/K allowed).')],
    answer: Annotated[str, typer.Argument(help='A formula ("5*(5-1/5)=24") or a whole JSON-like answer.')],
    target: Annotated[int, typer.Option(help="The number to make.")] = 24,
    rule_ood: Annotated[bool, typer.Option("--rule-ood", help="J/Q/K count as 11/12/13 instead of 10.")] = False,
) -> None:
    """Score one answer as the env would in L mode: outcome, reward and the verifier's message."""
    from rich.console import Console

    from spatialrl.envs.gp.answer import Answer, parse_answer
    from spatialrl.envs.gp.rewards import verify
    from spatialrl.envs.gp.solver import solutions

    console = Console()
    try:
        numbers = _numbers(cards.replace(",", " ").split(), rule_ood)
        if len(numbers) != 4:
            raise SpatialRLError(f"need four cards, got {len(numbers)}")
        parsed = parse_answer(answer) if '"formula"' in answer else Answer(None, None, answer)
        verdict = verify(parsed, numbers, [str(n) for n in numbers], solutions(numbers, target), target,
                         check_vision=False)
        console.print(f"{verdict.outcome.value} reward {verdict.reward:+g}: {verdict.verify_info}",
                      markup=False, highlight=False)
    except SpatialRLError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
