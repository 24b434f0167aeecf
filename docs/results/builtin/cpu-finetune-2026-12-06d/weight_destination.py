"""Weight the destination decision: samples answering stop() x4, the two before each (same episode) x2."""
import json, sys, re
from pathlib import Path
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
dst.mkdir(parents=True, exist_ok=True)
rows = [json.loads(l) for l in (src / "samples.jsonl").read_text().splitlines()]
def answer(r):
    return r["messages"][-1]["content"] if isinstance(r["messages"][-1]["content"], str) else \
        " ".join(c.get("text", "") for c in r["messages"][-1]["content"])
by_ep = {}
for i, r in enumerate(rows):
    by_ep.setdefault(r["episode_id"], []).append(i)
w = [1.0] * len(rows)
stops = 0
for ids in by_ep.values():
    ids.sort(key=lambda i: rows[i]["turns"][0])
    for k, i in enumerate(ids):
        if '"action": "stop()"' in answer(rows[i]):
            stops += 1
            w[i] = 4.0
            for j in ids[max(0, k - 2):k]:
                w[j] = max(w[j], 2.0)
with open(dst / "samples.jsonl", "w") as f:
    for r, x in zip(rows, w):
        f.write(json.dumps({**r, "weight": x}) + "\n")
meta = json.loads((src / "meta.json").read_text())
meta["weights"] = "destination: stop() answers 4, the two samples before each 2, others 1"
(dst / "meta.json").write_text(json.dumps(meta, indent=2))
if not (dst / "images").exists():
    (dst / "images").symlink_to((src / "images").resolve())
print(f"{len(rows)} samples, {stops} stop answers, weights: " + str({v: w.count(v) for v in set(w)}))
