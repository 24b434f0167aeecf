"""The one LRU map (spatialrl/lru.py) behind every cache."""

from __future__ import annotations

import threading

from spatialrl.lru import LRU


def test_bounded_by_size_least_recently_used_first():
    evicted = []
    lru = LRU(10, size=len, on_evict=evicted.append)
    lru.put("a", "xxxx")
    lru.put("b", "yyyy")
    assert lru.get("a") == "xxxx"  # a is now the most recent
    lru.put("c", "zzzz")  # 12 > 10: b goes
    assert "b" not in lru and "a" in lru and "c" in lru and evicted == ["yyyy"] and lru.total == 8
    assert lru.put("a", "other") == "xxxx"  # the kept value wins
    assert lru.pop("a") == "xxxx" and "a" not in lru and lru.total == 4 and evicted == ["yyyy"]
    lru.put("a", "xxxx")
    big = "q" * 11
    assert lru.put("big", big) is big and "big" not in lru  # larger than the bound: handed back, not kept


def test_deferred_trim_keeps_what_a_batch_needs():
    lru = LRU(2)
    for k in "abc":
        lru.put(k, k, trim=False)
    lru.trim(keep=["a"])
    assert "a" in lru and len(lru) == 2 and "b" not in lru
    zero = LRU(0)
    assert zero.put("k", "v") == "v" and len(zero) == 0  # capacity 0 = off


def test_threads_share_one_map():
    lru = LRU(1000)

    def work(base: int) -> None:
        for i in range(500):
            lru.put((base, i % 50), i)
            lru.get((base, (i + 7) % 50))

    threads = [threading.Thread(target=work, args=(b,)) for b in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(lru) == lru.total == 200
