"""Card pictures: the reference layout, colours by suit, and every card looking different."""

from __future__ import annotations

import itertools

import numpy as np

from spatialrl.envs.gp.card_images import RED, TABLE_COLOR, card_size, render_card, render_table
from spatialrl.envs.gp.cards import Card

W, H = 90, 126


def face(card: Card) -> np.ndarray:
    return np.asarray(render_card(card, W, H).convert("RGB"), dtype=np.int16)


def _reddish(img: np.ndarray) -> int:
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    return int(((r > 150) & (g < 90) & (b < 90)).sum())


def test_table_layout_matches_the_reference():
    assert card_size(1200) == (270, 378)
    img = render_table([Card(2, "S"), Card(3, "C"), Card(4, "S"), Card(5, "C")], 400)
    assert img.shape == (400, 400, 3) and img.dtype == np.uint8
    w, h = card_size(400)
    y0 = (400 - h) // 2
    for i in range(4):
        x0 = 5 + int(i * w * 1.1)
        assert tuple(img[y0 + h // 2, x0 + 3]) != TABLE_COLOR  # inside card i
        assert tuple(img[y0 - 2, x0 + w // 2]) == TABLE_COLOR  # above it: table
    assert tuple(img[0, 0]) == TABLE_COLOR and tuple(img[-1, -1]) == TABLE_COLOR


def test_suit_colours():
    red_cards = [Card(r, s) for r in (1, 7, 12) for s in "HD"]
    black_cards = [Card(r, s) for r in (1, 7, 12) for s in "SC"]
    assert all(_reddish(face(c)) > 50 for c in red_cards)
    assert all(_reddish(face(c)) == 0 for c in black_cards)
    assert RED[0] > 150


def test_every_card_face_is_distinct():
    faces = {(r, s): face(Card(r, s)) for r in range(1, 14) for s in "HDSC"}
    for a, b in itertools.combinations(faces, 2):
        diff = np.abs(faces[a] - faces[b]).sum(axis=-1)
        assert (diff > 60).sum() > 20, (a, b)  # clearly visible differences, not noise


def test_face_cards_differ_from_ten_and_each_other_beyond_the_letter():
    ten, jack, queen, king = (face(Card(r, "S")) for r in (10, 11, 12, 13))
    # Face cards carry a cream panel; number cards are plain paper.
    centre = (slice(H // 3, 2 * H // 3), slice(W // 3, 2 * W // 3))
    assert (np.abs(jack[centre].mean(axis=(0, 1)) - ten[centre].mean(axis=(0, 1)))).sum() > 10
    # Emblems (top of the panel) differ between J, Q and K.
    emblem = (slice(int(0.18 * H), int(0.4 * H)), slice(int(0.25 * W), int(0.75 * W)))
    for a, b in ((jack, queen), (queen, king), (jack, king)):
        assert (np.abs(a[emblem] - b[emblem]).sum(axis=-1) > 60).sum() > 30


def test_rendering_is_deterministic():
    cards = [Card(1, "H"), Card(10, "D"), Card(11, "S"), Card(13, "C")]
    render_card.cache_clear()
    first = render_table(cards, 256)
    render_card.cache_clear()
    assert np.array_equal(first, render_table(cards, 256))
