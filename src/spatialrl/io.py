"""Small file helpers shared by every reader and writer: JSON/YAML files read with errors that name the
file, atomic writes, tolerant JSONL reading, and the writing half of the SFT dataset folder
(content-addressed images, `write_sft_samples`)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder and a rename (never half-written)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp creates 0600; give the file normal permissions
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise



def save_png(fig: Any, path: str | os.PathLike, dpi: int = 120) -> Path:
    """A matplotlib figure as a PNG at ``path``, written atomically; the figure is closed (freed)."""
    import io as _io

    import matplotlib.pyplot as plt

    buffer = _io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())
    return Path(path)

def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")


def read_json(path: str | os.PathLike, missing: str = "file not found", error: type[Exception] | None = None) -> Any:
    """The parsed JSON file ``path``. Absent → ``error`` (default ``DataError``) "PATH: ``missing``";
    not UTF-8 JSON → "PATH: malformed JSON: <parser message>"."""
    return _read_parsed(path, missing, error, "JSON", json.loads, (json.JSONDecodeError, UnicodeDecodeError))


def read_yaml(path: str | os.PathLike, missing: str = "file not found", error: type[Exception] | None = None) -> Any:
    """The parsed YAML file ``path``, with :func:`read_json`'s errors ("PATH: malformed YAML: ...")."""
    import yaml

    return _read_parsed(path, missing, error, "YAML", yaml.safe_load, (yaml.YAMLError, UnicodeDecodeError))


def _read_parsed(path: str | os.PathLike, missing: str, error: type[Exception] | None, kind: str, parse: Any,
                 failures: tuple[type[Exception], ...]) -> Any:
    from spatialrl.errors import DataError

    error = error or DataError
    path = Path(path)
    if not path.is_file():
        raise error(f"{path}: {missing}")
    try:
        return parse(path.read_bytes().decode("utf-8"))
    except failures as e:
        raise error(f"{path}: malformed {kind}: {e}") from None


def read_jsonl(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSONL file. A truncated *last* line (a crash mid-write) is skipped;
    a malformed line elsewhere is an error naming the file and line."""
    path = Path(path)
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:
                return  # interrupted write: the record is incomplete and is redone on resume
            raise ValueError(f"{path}:{i + 1}: malformed JSON line: {e}") from e


def write_jsonl(path: str | os.PathLike, records: Iterable[dict[str, Any]]) -> None:
    """Atomically (re)write a whole JSONL file."""
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


class JsonlAppender:
    """Append-only JSONL writer that flushes every record, so a killed run loses at most one line."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def atomic_folder(out: str | os.PathLike) -> Iterator[Path]:
    """Build a folder under a temporary name beside ``out``; on success it replaces ``out`` (a reader never
    sees a half-written folder), on any error it is removed."""
    import shutil

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# ------------------------------------------------------------------------------ SFT dataset folders
# The writing half of the SFT dataset format (documented and read in ``train/data.py``). It lives here,
# below every task, so a task's own data makers (TVR's visual pretraining pairs, ``envs/tvr/pretrain.py``)
# write exactly the folders ``spatialrl data sft`` writes without importing the training layer.
SFT_FORMAT = "spatialrl-sft/1"


class ImageStore:
    """Content-addressed PNG store: each distinct image is encoded and written once.

    ``root`` is a folder under construction (:func:`atomic_folder`, published by one rename when every file
    is in), so each image is written plainly: a temp file, rename and fsync per image (what
    :func:`atomic_write_bytes` does) guarded against nothing the folder's own rename does not. PNGs are
    encoded by OpenCV at compression level 1 (lossless, about PIL's size). Together 1.55 ms per 280x168
    frame against 2.43 before (VM, ``benchmarks/image_store_speed.py``, ``results/image_store_speed-vm.json``)."""

    def __init__(self, root: Path):
        from spatialrl.lru import LRU

        self.root = root
        (root / "images").mkdir(parents=True, exist_ok=True)
        self.known: set[str] = set()
        # id(array) -> (array, path) for recently seen arrays: a multi-turn chat re-sends the same arrays
        # every turn, so this skips re-hashing them. Bounded, so old frames can be freed.
        self._recent = LRU(256)

    def put(self, image: Any) -> str:
        import hashlib

        import numpy as np

        from spatialrl.errors import DataError

        cached = self._recent.get(id(image))
        if cached is not None and cached[0] is image:
            return cached[1]
        arr = np.ascontiguousarray(np.asarray(image))
        if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
            raise DataError(f"image part: expected uint8 HxWx3, got dtype {arr.dtype} shape {arr.shape}")
        digest = hashlib.sha256(np.asarray(arr.shape, np.int64).tobytes() + arr.tobytes()).hexdigest()[:32]
        rel = f"images/{digest}.png"
        if digest not in self.known:
            import cv2

            ok, png = cv2.imencode(".png", cv2.cvtColor(arr, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 1])
            if not ok:
                raise DataError(f"image part: PNG encoding failed for shape {arr.shape}")
            (self.root / rel).write_bytes(png.tobytes())
            self.known.add(digest)
        self._recent.pop(id(image))  # the id of a freed array can be reused: the new one replaces it
        self._recent.put(id(image), (image, rel))
        return rel


def stored_conversation(conversation: list[dict[str, Any]], store: ImageStore) -> list[dict[str, Any]]:
    """A conversation with images replaced by their stored paths (JSON-able, cheap to compare)."""
    from spatialrl.conversation import message_header
    from spatialrl.errors import DataError

    out = []
    for message in conversation:
        content = message["content"]
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        stored = []
        for part in parts:
            if part.get("type") == "image":
                stored.append({"type": "image", "image": store.put(part["image"])})
            elif part.get("type") == "text":
                stored.append({"type": "text", "text": part["text"]})
            else:
                raise DataError(f"conversation part of unknown type {part.get('type')!r}")
        out.append({**message_header(message), "content": stored})
    return out


def write_sft_samples(out: str | os.PathLike, samples: Iterable[dict[str, Any]], meta: dict[str, Any],
                      overwrite: bool = False) -> dict[str, Any]:
    """An SFT dataset folder from ready-made samples, for data made without the expert runner (e.g. TVR's
    visual pretraining pairs, ``spatialrl tvr pretrain-data``); returns its ``meta.json``.

    Each sample is ``{"id", "episode_id", "category", "turns", "messages", ...}`` with image parts as
    uint8 HxWx3 arrays; they go through the same content-addressed image store and the same
    build-then-rename as ``train.data.build_sft_dataset``, so the folder reads, trains and merges like any
    other. ``samples`` may be a generator (images are stored as they come, never all held at once).
    ``meta`` says what built the data; ``format`` and the counts (``samples``, ``assistant_turns``,
    ``images``, ``categories``) are filled in here.
    """
    from spatialrl.errors import DataError

    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise DataError(f"{out}: folder exists and is not empty (pass --overwrite to replace it)")
    with atomic_folder(out) as tmp:
        store = ImageStore(tmp)
        rows: list[dict[str, Any]] = []
        categories: dict[str, int] = {}
        for i, sample in enumerate(samples):
            missing = [k for k in ("id", "episode_id", "category", "turns", "messages") if k not in sample]
            if missing:
                raise DataError(f"{out}: sample [{i}]: field(s) {', '.join(map(repr, missing))} missing")
            rows.append({**{k: v for k, v in sample.items() if k != "messages"},
                         "messages": stored_conversation(sample["messages"], store)})
            categories[sample["category"]] = categories.get(sample["category"], 0) + 1
        if not rows:
            raise DataError(f"{out}: no samples to write")
        write_jsonl(tmp / "samples.jsonl", rows)
        meta = {"format": SFT_FORMAT, **{k: v for k, v in meta.items() if k != "format"}, "samples": len(rows),
                "assistant_turns": sum(len(r["turns"]) for r in rows), "images": len(store.known),
                "categories": categories}
        atomic_write_json(tmp / "meta.json", meta)
    return meta
