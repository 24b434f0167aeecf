"""The GPU-speed SFT data engine: a dataset folder compiled once to flat arrays, batched on the device.

Why: the per-sample path (PNG decode → PIL → the processor's numpy patchify → the collator, on the CPU)
fed the shipped models ~7 samples/s on an H200 — 0.4% of the GPU. Here every sample is tokenised *once*
by the very code the per-sample path runs (:func:`spatialrl.models.encode.encode_conversations`:
same chat template, same assistant mask, same token ids), and every distinct image is stored once as
uint8 at the size the processor resizes it to. A training batch is then an index gather on the device:
token rows padded in place, pixels normalised and cut into the family's patch layout by a few tensor
ops. Nothing per-sample runs in Python during training.

On disk, beside the dataset (``DIR/tensors-<key>/``, ``key`` = a digest of the processor's tokenizer and
image settings, so a different model never reads stale ids)::

    ids.npy      int32  every sample's token ids, concatenated (images expanded to their pad tokens)
    labels.npy   bool   1 on assistant tokens (what the loss sees)
    offsets.npy  int64  sample i is ids[offsets[i]:offsets[i+1]]
    images.npy   uint8  (n_images, H, W, 3), each distinct image once, already at the processor's size
    image_ref.npy int32 the images of sample i are images[image_ref[image_offsets[i]:image_offsets[i+1]]]
    image_offsets.npy int64
    weights.npy  float32 every sample's ``weight`` (1.0 where its row has none), only for a weighted
                 dataset (see :mod:`spatialrl.train.data`); batches then carry ``sample_weight``
    meta.json    counts, sizes, key; written last (a folder without it is incomplete and rebuilt)

Scope: the Qwen2-VL / Qwen2.5-VL families (the built-in model's), whose pixel layout is rebuilt on the
device; all images of a dataset must share one size (TVR frames, V-IRL grids do). Other families keep the
per-sample collator (``data.engine: collator``), which stays the reference: ``tests/train`` checks that
both give the same ids, labels and pixels.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spatialrl.conversation import message_header
from spatialrl.errors import DataError
from spatialrl.io import atomic_folder, atomic_write_json
from spatialrl.models.encode import (
    IGNORE_INDEX,
    assistant_token_mask,
    encode_conversations,
    render_conversation,
)
from spatialrl.models.family import family_of

FORMAT = "spatialrl-sft-tensors/1"
FAMILIES = ("qwen2_vl", "qwen2_5_vl")


# ------------------------------------------------------------------------------------------ geometry
def image_settings(processor: Any) -> dict[str, Any]:
    """The image processor's settings that decide pixels and token counts."""
    ip = processor.image_processor
    size = getattr(ip, "size", None) or {}
    get = size.get if isinstance(size, dict) else (lambda k, d=None: getattr(size, k, d))
    return {"patch": int(ip.patch_size), "merge": int(ip.merge_size), "temporal": int(ip.temporal_patch_size),
            "min_pixels": int(get("shortest_edge", None) or ip.min_pixels),
            "max_pixels": int(get("longest_edge", None) or ip.max_pixels),
            "mean": [float(v) for v in ip.image_mean], "std": [float(v) for v in ip.image_std],
            "rescale": float(ip.rescale_factor)}


def resized_shape(height: int, width: int, settings: dict[str, Any]) -> tuple[int, int]:
    """(H, W) the processor resizes an image to (transformers' ``smart_resize``)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    return smart_resize(height, width, factor=settings["patch"] * settings["merge"],
                        min_pixels=settings["min_pixels"], max_pixels=settings["max_pixels"])


def resize_like_processor(image: np.ndarray, settings: dict[str, Any]) -> np.ndarray:
    """uint8 HxWx3 at the processor's size, resized as its PIL backend does (bicubic)."""
    from PIL import Image

    h, w = resized_shape(image.shape[0], image.shape[1], settings)
    if (h, w) == image.shape[:2]:
        return np.ascontiguousarray(image)
    return np.asarray(Image.fromarray(image).convert("RGB").resize((w, h), Image.Resampling.BICUBIC))


def pixel_values(images: torch.Tensor, settings: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 (n, H, W, 3) on any device → (pixel_values, image_grid_thw) in the Qwen-VL layout.

    The processor's steps on the device: rescale, normalise, repeat each frame ``temporal`` times, cut
    into ``patch``² patches ordered merge-block by merge-block: rows (n·gh·gw), columns (C·T·P·P).
    """
    n, H, W, C = images.shape
    P, M, T = settings["patch"], settings["merge"], settings["temporal"]
    gh, gw = H // P, W // P
    mean = torch.tensor(settings["mean"], device=images.device).view(1, C, 1, 1)
    std = torch.tensor(settings["std"], device=images.device).view(1, C, 1, 1)
    x = (images.permute(0, 3, 1, 2).float() * settings["rescale"] - mean) / std  # (n, C, H, W)
    x = x.reshape(n, C, gh // M, M, P, gw // M, M, P)
    x = x.permute(0, 2, 5, 3, 6, 1, 4, 7)  # (n, gh/M, gw/M, M, M, C, P, P)
    x = x.unsqueeze(6).expand(n, gh // M, gw // M, M, M, C, T, P, P)
    flat = x.reshape(n * gh * gw, C * T * P * P)
    grid = torch.tensor([[1, gh, gw]], dtype=torch.long, device=images.device).expand(n, 3).contiguous()
    return flat, grid


def mrope_position_ids(ids: torch.Tensor, valid: torch.Tensor, image_token_id: int, grid_hw: tuple[int, int]) -> torch.Tensor:
    """The Qwen-VL language model's 3-D rope positions (3, B, L) of a right-padded batch whose images all
    have ``grid_hw`` merged tokens (rows, cols): transformers' ``get_rope_index`` without its Python loop
    over samples and images (~9 syncs per sample on a GPU; 2026-12-05 it was 41% of the operations of a
    forward pass of the shipped TVR model at batch 32). Text tokens count on in all three axes; image ``k``'s token ``r`` sits at
    ``base + (0, r // cols, r % cols)`` with ``base`` = text tokens before it + ``k * max(rows, cols)``;
    padding gets 0. ``tests/train/test_tensor_data.py`` checks it equals ``get_rope_index``."""
    rows, cols = grid_hw
    image = (ids == image_token_id) & valid
    text = valid & ~image
    text_before = torch.cumsum(text, 1) - text.long()
    image_tokens_before = torch.cumsum(image, 1) - image.long()
    k, r = image_tokens_before // (rows * cols), image_tokens_before % (rows * cols)
    base = text_before + k * max(rows, cols)
    zero = torch.zeros_like(base)
    pos = torch.stack([base, base + torch.where(image, r // cols, zero), base + torch.where(image, r % cols, zero)])
    return pos.masked_fill(~valid, 0)


def processor_key(processor: Any) -> str:
    """Digest of what decides the compiled arrays: the tokenizer's vocabulary + template, the image settings."""
    tok = processor.tokenizer
    h = hashlib.sha256()
    h.update(json.dumps(sorted(tok.get_vocab().items())).encode())
    h.update(str(getattr(processor, "chat_template", "")).encode())
    h.update(json.dumps(image_settings(processor), sort_keys=True).encode())
    h.update(FORMAT.encode())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------------ compiling
def _one_thread() -> None:
    """Worker initialiser: one intra-op thread. N workers × all-core thread pools oversubscribe the CPU
    (the likely reason a 5-worker compile beside two others made no progress in 4 minutes on the GPU box)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    torch.set_num_threads(1)


def _compile_chunk(args: tuple[str, str, str, list[int]]) -> dict[str, Any]:
    """Encode samples ``indices`` of dataset ``root`` (runs in a worker process)."""
    root, model_path, model_type, indices = args
    from spatialrl.models.processor import load_processor

    processor = _PROCESSORS.get(model_path) or load_processor(model_path)
    _PROCESSORS[model_path] = processor
    return _encode_rows(Path(root), processor, model_type, indices)


_PROCESSORS: dict[str, Any] = {}


def _encode_rows(root: Path, processor: Any, model_type: str, indices: list[int]) -> dict[str, Any]:
    from PIL import Image

    from spatialrl.train.data import SFTDataset

    settings = image_settings(processor)
    rows = SFTDataset.rows_of(root)
    images: dict[str, np.ndarray] = {}
    ids, labels, refs = [], [], []
    for i in indices:
        row = rows[i]
        conv, paths = [], []
        for message in row["messages"]:
            parts = []
            for part in message["content"]:
                if part["type"] == "image":
                    path = part["image"]
                    if path not in images:
                        with Image.open(root / path) as im:
                            images[path] = resize_like_processor(np.asarray(im.convert("RGB")), settings)
                    paths.append(path)
                    parts.append({"type": "image", "image": images[path]})
                else:
                    parts.append(dict(part))
            conv.append({**message_header(message), "content": parts})
        row_ids, row_mask = encode_expanded(processor, conv, settings, str(row["id"]))
        ids.append(row_ids)
        labels.append(row_mask)
        refs.append(paths)
    return {"ids": ids, "labels": labels, "refs": refs, "images": images}


def _progress(parts: Any, total: int, root: Path, show: bool) -> Any:
    """Yield ``parts``, printing a line every ~10% when ``show`` (a long compile must not look hung)."""
    import time

    t0 = time.perf_counter()
    for k, part in enumerate(parts, 1):
        if show and (k == total or k % max(1, total // 10) == 0):
            print(f"compiling {root.name}: chunk {k}/{total} ({time.perf_counter() - t0:.0f} s)", flush=True)
        yield part


def encode_expanded(processor: Any, conversation: Any, settings: dict[str, Any], name: str) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and assistant mask of one conversation whose images are already at the processor's size.

    The collator's steps without its pixel work: the chat template text and the assistant mask come from
    :mod:`spatialrl.models.encode` (the same functions), then each image placeholder token is repeated
    ``(H/patch)·(W/patch)/merge²`` times — what the Qwen-VL processors do to the text before tokenising
    (the placeholder is a special token, so expanding the text or the ids is the same). ``tests/train``
    checks the result against the collator token for token.
    """
    rendered = render_conversation(processor, conversation, family_of(None, processor).fold_system)
    text_ids, mask = assistant_token_mask(processor.tokenizer, rendered)
    pad = int(processor.image_token_id)
    counts = []
    for image in rendered.images:
        w, h = image.size
        if (h, w) != resized_shape(h, w, settings):
            raise DataError(f"{name}: image of {w}x{h} is not at the processor's size")
        counts.append((h // settings["patch"]) * (w // settings["patch"]) // settings["merge"] ** 2)
    if text_ids.count(pad) != len(counts):
        raise DataError(f"{name}: {text_ids.count(pad)} image placeholders for {len(counts)} images")
    out_ids, out_mask, k = [], [], 0
    for token, m in zip(text_ids, mask, strict=True):
        if token == pad:
            out_ids += [pad] * counts[k]
            out_mask += [0] * counts[k]
            k += 1
        else:
            out_ids.append(token)
            out_mask.append(m)
    return np.asarray(out_ids, dtype=np.int32), np.asarray(out_mask, dtype=bool)


def _emits_token_types(processor: Any) -> bool:
    """Whether this processor returns ``mm_token_type_ids`` (newer transformers; 1 on image tokens)."""
    probe = [{"role": "user", "content": [{"type": "image", "image": np.zeros((56, 56, 3), np.uint8)},
                                          {"type": "text", "text": "x"}]}]
    batch = encode_conversations(processor, [probe])
    unknown = set(batch) - {"input_ids", "attention_mask", "labels", "pixel_values", "image_grid_thw",
                            "mm_token_type_ids"}
    if unknown:
        raise DataError(f"the processor returns {sorted(unknown)}, which data.engine=tensor does not rebuild; "
                        "use data.engine=collator")
    if "mm_token_type_ids" in batch:
        if not torch.equal(batch["mm_token_type_ids"][0].bool(), batch["input_ids"][0] == processor.image_token_id):
            raise DataError("mm_token_type_ids is not the image-token mask; use data.engine=collator")
        return True
    return False


def compile_dataset(root: str | Path, processor: Any, model_type: str, model_path: str | None = None,
                    workers: int = 0, chunk: int = 256, progress: bool = False) -> Path:
    """Compile dataset folder ``root`` for ``processor`` (once; later calls return the existing folder).

    ``workers`` > 0 encodes chunks in that many processes (they load the processor from ``model_path``, or
    from a temporary copy of ``processor`` when it has no folder).
    """
    if model_type not in FAMILIES:
        raise DataError(f"data.engine=tensor supports the {', '.join(FAMILIES)} families, not {model_type!r}; "
                        "use data.engine=collator")
    from spatialrl.train.data import SFTDataset, sample_weights

    root = Path(root)
    key = processor_key(processor)
    out = root / f"tensors-{key}"
    if (out / "meta.json").is_file():
        return out
    rows = SFTDataset.rows_of(root)
    weights = sample_weights(rows, root / "samples.jsonl")
    token_types = _emits_token_types(processor)  # also refuses processors whose outputs we do not rebuild
    chunks = [list(range(s, min(s + chunk, len(rows)))) for s in range(0, len(rows), chunk)]
    if workers > 0 and len(chunks) > 1:
        with tempfile.TemporaryDirectory() as saved:
            if model_path is None:  # workers load the processor from a folder
                processor.save_pretrained(saved)
                model_path = saved
            # spawn, not fork: a trainer has already run torch's OpenMP pool, and a forked child that
            # enters it again hangs (seen on the GPU machine: the compile never finished)
            import multiprocessing as mp

            with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_one_thread) as pool:
                jobs = pool.map(_compile_chunk, [(str(root), model_path, model_type, c) for c in chunks])
                parts = list(_progress(jobs, len(chunks), root, progress))
    else:
        parts = list(_progress((_encode_rows(root, processor, model_type, c) for c in chunks), len(chunks), root,
                               progress))

    image_id: dict[str, int] = {}
    image_arrays: list[np.ndarray] = []
    ids, labels, refs = [], [], []
    for part in parts:
        for path, arr in part["images"].items():
            if path not in image_id:
                image_id[path] = len(image_arrays)
                image_arrays.append(arr)
        ids += part["ids"]
        labels += part["labels"]
        refs += [[image_id[p] for p in paths] for paths in part["refs"]]
    shapes = {a.shape for a in image_arrays}
    if len(shapes) > 1:
        raise DataError(f"{root}: images of {len(shapes)} sizes after resizing ({sorted(shapes)[:3]}...); "
                        "data.engine=tensor needs one size (render the data at one size, or use data.engine=collator)")
    with atomic_folder(out) as tmp:
        np.save(tmp / "ids.npy", np.concatenate(ids).astype(np.int32))
        np.save(tmp / "labels.npy", np.concatenate(labels).astype(bool))
        np.save(tmp / "offsets.npy", np.concatenate([[0], np.cumsum([len(x) for x in ids])]).astype(np.int64))
        first = image_arrays[0].shape if image_arrays else (0, 0, 3)
        np.save(tmp / "images.npy", np.stack(image_arrays) if image_arrays else np.zeros((0, *first), np.uint8))
        np.save(tmp / "image_ref.npy", np.asarray([r for rs in refs for r in rs], dtype=np.int32))
        np.save(tmp / "image_offsets.npy",
                np.concatenate([[0], np.cumsum([len(r) for r in refs])]).astype(np.int64))
        if weights is not None:
            np.save(tmp / "weights.npy", np.asarray(weights, dtype=np.float32))
        atomic_write_json(tmp / "meta.json", {"format": FORMAT, "key": key, "samples": len(ids),
                                              "tokens": int(sum(len(x) for x in ids)),
                                              "images": len(image_arrays), "image_shape": list(first),
                                              "image_token_id": int(processor.image_token_id),
                                              "mm_token_type_ids": token_types,
                                              "weighted": weights is not None,
                                              "image_settings": image_settings(processor)})
    return out


# ------------------------------------------------------------------------------------------ batching
class TensorBatcher:
    """A compiled dataset resident on ``device``; ``batch(indices)`` returns the collator's inputs.

    ``batch`` gives ``input_ids`` / ``attention_mask`` / ``labels`` right-padded to the longest sample,
    ``pixel_values`` and ``image_grid_thw`` — the same tensors as
    :class:`spatialrl.train.sft.Collator` (ids and labels equal, pixels equal to float rounding) —, the
    language model's rope ``position_ids`` (:func:`mrope_position_ids`; the model then skips its own
    per-sample loop) and ``sample_weight`` (float32, [batch]) when the folder has ``weights.npy``.
    """

    def __init__(self, folder: str | Path, pad_token_id: int, device: str | torch.device = "cpu",
                 images_on_device: bool = True):
        folder = Path(folder)
        meta_path = folder / "meta.json"
        if not meta_path.is_file():
            raise DataError(f"{folder}: not a compiled dataset (no meta.json)")
        self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
        self.settings = self.meta["image_settings"]
        self.device = torch.device(device)

        def load(name: str) -> torch.Tensor:
            return torch.from_numpy(np.load(folder / f"{name}.npy")).to(self.device)

        self.ids, self.labels, self.offsets = load("ids"), load("labels"), load("offsets")
        self.image_ref, self.image_offsets = load("image_ref"), load("image_offsets")
        # The frames are most of the bytes (AO data: 10-18 GiB of uint8 at 280x168). Resident on the device
        # they cost nothing per batch; else memory-mapped (page cache shared by every process reading the
        # folder) and each batch's frames copied over through pinned memory: ~36 MB per batch of 128 pairs.
        if images_on_device:
            self.images = load("images")
            self.host_images: np.ndarray | None = None
        else:
            self.host_images = np.load(folder / "images.npy", mmap_mode="r")
            self.images = torch.empty((0, *self.host_images.shape[1:]), dtype=torch.uint8)  # shape only
        self.weights = load("weights") if (folder / "weights.npy").is_file() else None
        self.lengths = self.offsets[1:] - self.offsets[:-1]
        # merged tokens per image (rows, cols), one size for the dataset; a text-only dataset has no image
        # tokens, and any non-zero grid then gives plain text positions
        unit = self.settings["patch"] * self.settings["merge"]
        n_images, height, width, _ = self.host_images.shape if self.host_images is not None else self.images.shape
        self.image_grid = (height // unit, width // unit) if n_images else (1, 1)
        self.pad = int(pad_token_id)

    def __len__(self) -> int:
        return int(self.meta["samples"])

    def batch(self, indices: list[int] | torch.Tensor) -> dict[str, torch.Tensor]:
        idx = torch.as_tensor(indices, dtype=torch.long, device=self.device)
        lengths = self.lengths[idx]
        width = int(lengths.max())
        cols = torch.arange(width, device=self.device)
        valid = cols[None, :] < lengths[:, None]
        where = (self.offsets[idx][:, None] + cols[None, :]).clamp(max=self.ids.numel() - 1)
        ids = torch.where(valid, self.ids[where].long(), torch.full_like(where, self.pad))
        labels = torch.where(valid & self.labels[where], ids, torch.full_like(ids, IGNORE_INDEX))
        out = {"input_ids": ids, "attention_mask": valid.long(), "labels": labels}
        out["position_ids"] = mrope_position_ids(ids, valid, self.meta["image_token_id"], self.image_grid)
        if self.meta.get("mm_token_type_ids"):
            out["mm_token_type_ids"] = (ids == self.meta["image_token_id"]).long()
        if self.weights is not None:
            out["sample_weight"] = self.weights[idx]
        starts, ends = self.image_offsets[idx], self.image_offsets[idx + 1]
        counts = ends - starts
        if int(counts.sum()) > 0:
            # image_ref positions of the batch's images, sample by sample, in order
            pos = torch.repeat_interleave(starts - torch.cumsum(counts, 0) + counts, counts) + torch.arange(
                int(counts.sum()), device=self.device)
            pixels, grid = pixel_values(self.frames(self.image_ref[pos].long()), self.settings)
            out["pixel_values"], out["image_grid_thw"] = pixels, grid
        return out

    def frames(self, refs: torch.Tensor) -> torch.Tensor:
        """uint8 frames ``refs`` (rows of images.npy) on the device."""
        if self.host_images is None:
            return self.images[refs]
        rows = torch.from_numpy(self.host_images[refs.cpu().numpy()])  # a gather from the page cache
        if self.device.type == "cuda":
            rows = rows.pin_memory()  # then one asynchronous copy over
        return rows.to(self.device, non_blocking=True)
