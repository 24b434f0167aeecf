"""Expert SFT datasets: expert episodes rendered through the eval prompt code, written to disk.

How a dataset is made (``spatialrl data sft``): the expert policy plays the task's episodes through the
batched runner (:func:`spatialrl.rollout.runner.run_episodes`), and the runner's ``on_turn`` hook
captures each turn's conversation — built by the task's own Prompter, the very code eval and RL use,
so prompts are byte-identical — together with the expert's answer. There is no second prompt path.

Two sample shapes, chosen per episode:

* **step** — one sample per turn: the conversation sent, plus the answer as the assistant turn
  (V-IRL single-turn pairs, TVR action-only memory, GeneralPoints);
* **episode** — one sample per trajectory: the last conversation plus its answer, where every
  assistant turn is supervised (TVR visual-action memory).

``samples="auto"`` picks *episode* when every turn's conversation extends the previous one with the
previous answer (a growing multi-turn chat), else *step* — decided from the conversations themselves,
never from the task's name.

On disk (``format: spatialrl-sft/1``)::

    DIR/meta.json       what was built and how (task, options, seed, counts, command)
    DIR/samples.jsonl   {"id", "episode_id", "category", "turns", "messages"} per line; image parts
                        are {"type": "image", "image": "images/<sha256>.png"}; rows built with
                        labels="all_optimal" also carry "n_labels" (k, the size of the state's set of
                        optimal answers) and "weight" (1/k)
    DIR/images/*.png    each distinct image once (content-addressed: a target view shared by every
                        step of an episode is stored once)

The folder is built under a temporary name and renamed when complete, so a killed build never leaves
a dataset that looks finished. Same task data + options + seed → the same bytes.

``weight`` (optional, a finite number > 0; 1.0 where absent) scales a sample's summed token
cross-entropy *and* its token count in the SFT loss (:func:`spatialrl.train.sft.token_loss`). The k
samples of an all-optimal state weigh 1/k each, so the state counts once and its loss is the
cross-entropy against the uniform distribution over its k optimal answers. Rows without it (expert
labels) train exactly as before. A dataset with no weighted row has no weights at all: the trainer
then takes its unweighted path.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from spatialrl.agents.base import Conversation, Generation, SamplingParams
from spatialrl.conversation import message_header
from spatialrl.errors import DataError
from spatialrl.io import SFT_FORMAT, atomic_folder, atomic_write_json, read_json, read_jsonl, write_jsonl
from spatialrl.io import ImageStore as _ImageStore
from spatialrl.io import stored_conversation as _stored

FORMAT = SFT_FORMAT  # the writing half of the format lives in spatialrl/io.py (below the tasks)
SampleMode = Literal["auto", "step", "episode"]
# (options, info, expert response) -> the reasoning text put inside <think>...</think>.
ThoughtFn = Callable[[dict[str, Any], dict[str, Any], str], str]


def cot_response(thought: str, response: str) -> str:
    """The CoT answer format shared by every task: ``<think>…</think>`` then the plain answer."""
    thought = thought.replace("<think>", "").replace("</think>", "").strip()
    return f"<think>{thought}</think>\n{response}"


# ------------------------------------------------------------------------------------------ policies
class CoTExpertPolicy:
    """The expert, answering with reasoning first: ``<think>{thought}</think>\\n{expert answer}``.

    The thought comes from ``thought_fn`` (a task template) or, when ``annotator`` is given, from any
    Policy (e.g. an OpenAI-compatible API model) asked to explain the expert's answer; if the annotator
    fails on a conversation, the template is used for that turn (counted in ``fallbacks``). The CoT
    answers are what the env steps on and what the prompter remembers, so multi-turn samples carry
    the reasoning in every assistant turn, as a CoT model's own history would.
    """

    name = "expert-cot"

    def __init__(self, options: dict[str, Any], thought_fn: ThoughtFn, annotator: Any | None = None,
                 annotator_tokens: int = 128):
        self.options = options
        self.thought_fn = thought_fn
        self.annotator = annotator
        self.annotator_tokens = annotator_tokens
        self.fallbacks = 0

    def generate(self, conversations: list[Conversation], sampling: SamplingParams,
                 infos: list[dict[str, Any]] | None = None) -> list[Generation]:
        if infos is None or len(infos) != len(conversations):
            raise ValueError("the CoT expert needs the env info of every conversation (infos=...)")
        answers = [info["expert_response"] for info in infos]
        thoughts = [self.thought_fn(self.options, info, answer) for info, answer in zip(infos, answers, strict=True)]
        if self.annotator is not None:
            asks = [annotation_request(conv, answer) for conv, answer in zip(conversations, answers, strict=True)]
            notes = self.annotator.generate(asks, SamplingParams(max_new_tokens=self.annotator_tokens, seed=sampling.seed))
            for i, note in enumerate(notes):
                text = (note.text or "").strip()
                if note.error is None and text:
                    thoughts[i] = text
                else:
                    self.fallbacks += 1
        return [Generation(text=cot_response(t, a)) for t, a in zip(thoughts, answers, strict=True)]


def annotation_request(conversation: Conversation, answer: str) -> Conversation:
    """Ask an annotator model for the reasoning behind a known-correct answer (images included)."""
    ask = ("The correct answer to the last message is:\n" + answer + "\n\nWrite the short reasoning (one to three "
           "sentences, first person) that leads to this answer, comparing what you see with what the task asks. "
           "Reply with the reasoning only, without repeating the answer.")
    return [*conversation, {"role": "user", "content": [{"type": "text", "text": ask}]}]


# ------------------------------------------------------------------------------------------ building
@dataclass
class _Episode:
    spec: Any
    turns: list[tuple[list[dict[str, Any]], str]] = field(default_factory=list)  # (stored conversation, answer)
    label_sets: list[list[str]] | None = None  # labels="all_optimal": every optimal answer of each turn


def _assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def is_growing_chat(turns: list[tuple[list[dict[str, Any]], str]]) -> bool:
    """True when each turn's conversation starts with the previous conversation plus its answer."""
    for (prev, answer), (conv, _) in zip(turns, turns[1:], strict=False):
        head = [*prev, _assistant(answer)]
        if conv[: len(head)] != head:
            return False
    return True


def episode_samples(episode: _Episode, mode: SampleMode) -> list[dict[str, Any]]:
    """The samples of one finished expert episode (see the module docstring for the two shapes)."""
    spec = episode.spec
    turns = episode.turns
    if not turns:
        return []
    growing = is_growing_chat(turns)
    if mode == "episode" and not growing:
        raise DataError(f"episode {spec.episode_id}: samples='episode' needs a growing multi-turn chat, but this "
                        "task's prompter restarts the conversation (use samples='step')")
    base = {"episode_id": spec.episode_id, "category": spec.category}
    if episode.label_sets is not None:  # one sample per optimal answer (the image files are shared)
        return [{"id": f"{spec.episode_id}/t{t:03d}/a{k}", **base, "turns": [t], "n_labels": len(labels),
                 "weight": 1.0 / len(labels), "messages": [*conv, _assistant(label)]}
                for t, ((conv, _), labels) in enumerate(zip(turns, episode.label_sets, strict=True))
                for k, label in enumerate(labels)]
    if mode == "episode" or (mode == "auto" and growing and len(turns) > 1):
        conv, answer = turns[-1]
        return [{"id": spec.episode_id, **base, "turns": list(range(len(turns))),
                 "messages": [*conv, _assistant(answer)]}]
    return [{"id": f"{spec.episode_id}/t{t:03d}", **base, "turns": [t], "messages": [*conv, _assistant(answer)]}
            for t, (conv, answer) in enumerate(turns)]


def select_episodes(all_episodes: list[Any], n: int | None, seed: int) -> list[Any]:
    """The first ``n`` of a seeded shuffle of the suite's episodes (all of them when ``n`` is None)."""
    if n is None or n >= len(all_episodes):
        if n is not None and n > len(all_episodes):
            raise DataError(f"--episodes {n}: the task offers only {len(all_episodes)} episodes with these options")
        return list(all_episodes)
    order = np.random.default_rng(seed).permutation(len(all_episodes))[:n]
    return [all_episodes[i] for i in sorted(order.tolist())]


LabelMode = Literal["expert", "all_optimal"]


def check_label_set(suite: Any, options: dict[str, Any], spec: Any) -> None:
    """Refuse all-optimal labels for a task whose env info has no set of optimal answers
    (``info["expert_responses"]``), checked on one reset before any episode runs."""
    env = suite.make_env(options)
    try:
        _, info = env.reset(seed=spec.seed, options=dict(spec.reset_options))
        if not info.get("expert_responses"):
            raise DataError(f"--labels all_optimal: the {suite.name} env info has no 'expert_responses' (the set "
                            "of optimal answers at a state); only TVR provides it")
    finally:
        env.close()


def context_only(conversation: Conversation) -> Conversation:
    """``conversation`` with its assistant turns marked ``"train": false``: the acting policy's earlier
    answers (noise, roll-in agent), which a multi-turn prompt repeats — TVR ``memory=va`` keeps every
    answer, V-IRL's retry turn holds the wrong one — stay in the sample as context but are not targets
    (``models/encode.py``); only the sample's last answer, the expert's label, is trained on."""
    return [{**m, "train": False} if m["role"] == "assistant" else m for m in conversation]


class _AllOptimalLabels:
    """Wraps the acting policy: each generation also carries ``extra["labels"]``, every optimal answer at
    the state it was asked in (the env's ``info["expert_responses"]``)."""

    def __init__(self, inner: Any, task: str):
        self.inner, self.task = inner, task
        self.name = getattr(inner, "name", type(inner).__name__)
        self.device = getattr(inner, "device", None)  # seen by the runner's CPU-time warning

    def generate(self, conversations: list[Conversation], sampling: SamplingParams,
                 infos: list[dict[str, Any]] | None = None) -> list[Generation]:
        gens = self.inner.generate(conversations, sampling, infos)
        for gen, info in zip(gens, infos or [], strict=True):
            labels = info.get("expert_responses")
            if not labels:
                raise DataError(f"--labels all_optimal: the {self.task} env info has no 'expert_responses' "
                                "(the set of optimal answers); only TVR provides it")
            gen.extra = {**gen.extra, "labels": [str(x) for x in labels]}
        return gens


def build_sft_dataset(
    suite: Any,
    options: dict[str, Any],
    out: str | Path,
    episodes: int | None = None,
    seed: int = 0,
    samples: SampleMode = "auto",
    thought_fn: ThoughtFn | None = None,
    annotator: Any | None = None,
    batch_size: int = 16,
    only_success: bool = True,
    overwrite: bool = False,
    progress: bool = True,
    command: str | None = None,
    expert_noise: float = 0.0,
    roll_in: Any | None = None,
    roll_in_beta: float = 0.0,
    roll_in_name: str | None = None,
    sampling: SamplingParams | None = None,
    labels: LabelMode = "expert",
) -> dict[str, Any]:
    """Run the (CoT) expert on ``suite`` and write an SFT dataset folder; returns its ``meta.json``.

    ``expert_noise`` > 0 steps a random other action on that share of turns (states off the expert's
    path, as DART/DAgger collect them) while every sample's answer stays the expert's label; such
    episodes are kept whether or not they succeed, and the samples are per step.

    ``roll_in`` (a Policy; ``roll_in_name`` is its spec, recorded in meta.json) is DAgger's roll-in: the
    agent's answers drive the episode (the expert's instead on a share ``roll_in_beta`` of turns, see
    :class:`~spatialrl.agents.expert.RollInPolicy`) and every sample's answer is the expert's label at
    the state the agent reached; episodes are kept whether or not they succeed. ``sampling`` is the
    agent's decoding (default greedy, ``seed``). An episode the agent ends with an error keeps the
    samples of its turns so far and is listed in ``episodes_agent_errors``.

    ``labels="all_optimal"`` (TVR) writes one sample per optimal action of each state instead of the
    expert's single tie-broken one (``n_labels`` on each row = the size k of that state's set, ``weight`` =
    1/k so the trainer counts the state once).

    Noise, roll-in and all-optimal labels give per-step samples of the plain expert's answers (no CoT, no
    ``samples="episode"``); in a multi-turn prompt the earlier answers are the acting policy's and are
    marked ``"train": false`` (:func:`context_only`), so only each sample's last answer is a target.

    ``thought_fn`` switches on CoT answers (``<think>…</think>`` + answer). ``only_success`` drops
    episodes the expert did not finish successfully (there should be none; they are counted).
    """
    from spatialrl.agents.expert import ExpertPolicy, RollInPolicy
    from spatialrl.rollout.runner import run_episodes

    if samples not in ("auto", "step", "episode"):
        raise ValueError(f"samples must be auto, step or episode, got {samples!r}")
    if labels not in ("expert", "all_optimal"):
        raise ValueError(f"labels must be expert or all_optimal, got {labels!r}")
    if roll_in is not None and expert_noise > 0:
        raise DataError("--roll-in and --expert-noise both choose the stepped actions; use one of them")
    off_path = expert_noise > 0 or roll_in is not None  # episodes kept whether or not they succeed
    special = [what for what, on in (("expert noise", expert_noise > 0), ("roll-in", roll_in is not None),
                                     ("all-optimal labels", labels == "all_optimal")) if on]
    if special and (thought_fn is not None or samples == "episode"):
        raise DataError(f"{' and '.join(special)} work with per-step samples of the plain expert "
                        "(no --cot, samples step/auto)")
    mode: SampleMode = "step" if special else samples  # off-path samples: one per state, history as context
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise DataError(f"{out}: folder exists and is not empty (pass --overwrite to replace it)")
    chosen = select_episodes(suite.episodes(options), episodes, seed)
    if labels == "all_optimal" and chosen:
        check_label_set(suite, options, chosen[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_folder(out) as tmp:
        store = _ImageStore(tmp)
        live: dict[str, _Episode] = {
            spec.episode_id: _Episode(spec, label_sets=[] if labels == "all_optimal" else None) for spec in chosen}
        results: dict[str, list[dict[str, Any]]] = {}
        dropped: list[str] = []

        def on_turn(spec: Any, conversation: Conversation, generation: Generation, step: tuple) -> None:
            episode = live[spec.episode_id]
            _, _, terminated, truncated, info = step
            # an answer the env never read is no sample: V-IRL's call after its retries are spent is a forced
            # failure whatever it says (a noisy expert's two wrong answers at one point led to ~3% of such
            # samples, a third attempt no evaluation ever scores)
            if (info.get("record") or {}).get("evaluated", True):
                if special:
                    conversation = context_only(conversation)
                episode.turns.append((_stored(conversation, store), generation.extra.get("label", generation.text)))
                if episode.label_sets is not None:
                    episode.label_sets.append(generation.extra["labels"])
            if terminated or truncated:
                success = bool(info.get("episode", {}).get("success", False))
                if only_success and not success and not off_path:
                    dropped.append(spec.episode_id)
                else:
                    results[spec.episode_id] = episode_samples(episode, mode)
                del live[spec.episode_id]

        if roll_in is not None:
            policy: Any = RollInPolicy(roll_in, roll_in_beta)
        elif thought_fn is None:
            policy = ExpertPolicy(expert_noise)
        else:
            policy = CoTExpertPolicy(options, thought_fn, annotator)
        acting = _AllOptimalLabels(policy, suite.name) if labels == "all_optimal" else policy
        run = run_episodes(suite, options, acting, chosen, batch_size=batch_size,
                           sampling=sampling or SamplingParams(seed=seed), out_dir=None, progress=progress,
                           on_turn=on_turn)
        agent_errors = []
        if roll_in is not None:  # the agent failed to answer (e.g. an API error): keep the states reached
            errors = {r["episode_id"]: r.get("error") for r in run.episodes}
            for episode_id, episode in list(live.items()):
                agent_errors.append({"episode_id": episode_id, "error": errors.get(episode_id)})
                results[episode_id] = episode_samples(episode, mode)
                del live[episode_id]
        if live:
            raise DataError(f"{len(live)} expert episodes did not finish (e.g. {next(iter(live))})")
        rows = [s for spec in chosen for s in results.get(spec.episode_id, [])]
        if not rows:
            raise DataError("the expert produced no samples (every episode failed or none was selected)")
        write_jsonl(tmp / "samples.jsonl", rows)
        categories: dict[str, int] = {}
        for row in rows:
            categories[row["category"]] = categories.get(row["category"], 0) + 1
        meta = {
            "format": FORMAT,
            "task": suite.name,
            "options": _jsonable(options),
            "seed": seed,
            "samples_mode": samples,
            "cot": thought_fn is not None,
            "annotator": getattr(annotator, "name", None),
            "annotator_fallbacks": getattr(policy, "fallbacks", 0),
            "episodes": len(chosen) - len(dropped),
            "episodes_dropped": dropped,
            "samples": len(rows),
            "assistant_turns": sum(len(r["turns"]) for r in rows),
            "images": len(store.known),
            "categories": categories,
            "expert_noise": expert_noise,
            "labels": labels,
            "roll_in": None if roll_in is None else (roll_in_name or getattr(roll_in, "name", type(roll_in).__name__)),
            "roll_in_beta": None if roll_in is None else float(roll_in_beta),
            "command": command,
        }
        if labels == "all_optimal":  # several samples per state: how many states they label
            meta["states"] = len({(r["episode_id"], r["turns"][0]) for r in rows})
        if roll_in is not None:
            sp = sampling or SamplingParams(seed=seed)
            meta["roll_in_sampling"] = {"temperature": sp.temperature, "top_p": sp.top_p,
                                        "max_new_tokens": sp.max_new_tokens, "seed": sp.seed}
            meta["roll_in_turns"] = dict(policy.turns)
            meta["episodes_success"] = sum(bool(r.get("success")) for r in run.episodes if not r.get("error"))
            meta["episodes_agent_errors"] = agent_errors
        atomic_write_json(tmp / "meta.json", meta)
    return meta


def merge_sft_datasets(sources: list[str | Path], out: str | Path, overwrite: bool = False) -> dict[str, Any]:
    """One dataset from several (e.g. shards built in parallel processes, on different cities or benches).

    Samples keep their order, source by source; a sample id seen before gets the ``<source index>:`` prefix.
    Rows are copied whole, so a sample's ``weight`` is kept (rows of an unweighted source read as 1.0).
    Images are content-addressed, so the union of the ``images/`` folders is exact (hard links where the
    file system allows). Built under a temporary name and renamed, like ``build_sft_dataset``.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise DataError(f"{out}: folder exists and is not empty (pass --overwrite to replace it)")
    datasets = [SFTDataset(src) for src in sources]
    if not datasets:
        raise DataError("merge: no source datasets")
    tasks = {d.meta.get("task") for d in datasets}
    if len(tasks) != 1:
        raise DataError(f"merge: the sources hold different tasks {sorted(map(str, tasks))}")
    with atomic_folder(out) as tmp:
        (tmp / "images").mkdir()
        rows, seen, categories, n_images = [], set(), {}, 0
        for k, d in enumerate(datasets):
            for image in (d.root / "images").iterdir():
                target = tmp / "images" / image.name
                if target.exists():
                    continue
                try:
                    os.link(image, target)
                except OSError:
                    shutil.copyfile(image, target)
                n_images += 1
            for row in d.rows:
                row = dict(row)
                if row["id"] in seen:
                    row["id"] = f"{k}:{row['id']}"
                seen.add(row["id"])
                categories[row.get("category")] = categories.get(row.get("category"), 0) + 1
                rows.append(row)
        write_jsonl(tmp / "samples.jsonl", rows)
        first = datasets[0].meta
        meta = {**{k: first.get(k) for k in ("format", "task", "samples_mode", "cot")},
                "options": first.get("options"), "merged_from": [str(Path(s)) for s in sources],
                "source_meta": [d.meta for d in datasets],
                "episodes": sum(int(d.meta.get("episodes", 0)) for d in datasets), "samples": len(rows),
                "assistant_turns": sum(len(r.get("turns", [0])) for r in rows), "images": n_images,
                "categories": categories, "episodes_dropped": []}
        atomic_write_json(tmp / "meta.json", meta)
    return meta


def sample_weights(rows: list[dict[str, Any]], path: str | Path) -> list[float] | None:
    """Every row's ``weight`` (1.0 where absent), or None when no row has one (an unweighted dataset).

    Raises :class:`DataError` naming ``path``, the line and the field for a weight that is not a finite
    number > 0.
    """
    if not any("weight" in row for row in rows):
        return None
    out = []
    for i, row in enumerate(rows):
        value = row.get("weight", 1.0)
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        if not ok:
            raise DataError(f"{path}:{i + 1}: field 'weight' is {value!r}, expected a finite number > 0")
        out.append(float(value))
    return out


@lru_cache(maxsize=4)
def _rows_of(root: str) -> list[dict[str, Any]]:
    return list(read_jsonl(Path(root) / "samples.jsonl"))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


# ------------------------------------------------------------------------------------------- reading
class SFTDataset:
    """A dataset folder as a map-style dataset (works with ``torch.utils.data.DataLoader``).

    ``dataset[i]`` is ``{"id", "episode_id", "category", "turns", "messages"}`` with image parts loaded
    back to uint8 HxWx3 arrays (PNG is lossless: the arrays equal what the env rendered). In a weighted
    dataset (some row has ``weight``, see the module docstring) every sample also has ``"weight"`` (1.0
    where its row has none); ``weights`` is the list of them, None for an unweighted dataset.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)
        meta_path = self.root / "meta.json"
        if not meta_path.is_file():
            raise DataError(f"{self.root}: not an SFT dataset (no meta.json); build one with `spatialrl data sft`")
        self.meta = read_json(meta_path)
        if self.meta.get("format") != FORMAT:
            raise DataError(f"{meta_path}: field 'format' is {self.meta.get('format')!r}, expected {FORMAT!r}")
        path = self.root / "samples.jsonl"
        if not path.is_file():
            raise DataError(f"{path}: missing")
        self.rows = list(read_jsonl(path))
        for i, row in enumerate(self.rows):
            for key in ("id", "messages"):
                if key not in row:
                    raise DataError(f"{path}:{i + 1}: field {key!r} is missing")
            for message in row["messages"]:
                for part in message.get("content", []):
                    if part.get("type") == "image" and not (self.root / part["image"]).is_file():
                        raise DataError(f"{path}:{i + 1}: image {part['image']!r} not found in {self.root}")
        self.weights = sample_weights(self.rows, path)

    def __len__(self) -> int:
        return len(self.rows)

    @staticmethod
    def rows_of(root: str | Path) -> list[dict[str, Any]]:
        """The rows of ``root/samples.jsonl`` as stored (image parts are paths), read once per process."""
        return _rows_of(str(Path(root).resolve()))

    def __getitem__(self, index: int) -> dict[str, Any]:
        from PIL import Image

        row = self.rows[index]
        messages = []
        for message in row["messages"]:
            content = []
            for part in message["content"]:
                if part["type"] == "image":
                    with Image.open(self.root / part["image"]) as im:
                        content.append({"type": "image", "image": np.asarray(im.convert("RGB"))})
                else:
                    content.append(dict(part))
            messages.append({**message_header(message), "content": content})
        sample = {**{k: v for k, v in row.items() if k != "messages"}, "messages": messages}
        if self.weights is not None:
            sample["weight"] = self.weights[index]
        return sample
