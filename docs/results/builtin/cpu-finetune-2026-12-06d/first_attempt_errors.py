import json, sys, collections
steps = [json.loads(l) for l in open(sys.argv[1] + "/steps.jsonl")]
eps = [json.loads(l) for l in open(sys.argv[1] + "/episodes.jsonl")]
kind = lambda a: (a or "").split("(")[0]
first = collections.Counter(); wrong_first = collections.Counter(); conf = collections.Counter()
prev = {}
retries = wrong_retries = 0
for s in steps:
    key = (s["episode_id"], s["rail_index"])
    is_retry = key in prev
    prev[key] = True
    exp, got = kind(s["expected_action"]), kind(s.get("action"))
    ok = s["reward"] > 0
    if is_retry:
        retries += 1; wrong_retries += not ok
        continue
    first[exp] += 1
    if not ok:
        wrong_first[exp] += 1
        conf[(exp, got if got else "unparsed")] += 1
n = len(steps); correct = sum(s["reward"] > 0 for s in steps)
print(f"episodes {len(eps)} success {sum(e.get('success', e.get('is_success', 0)) for e in eps)}; steps {n}, per-step {correct/n:.3f}; retries {retries} ({wrong_retries} wrong)")
for k in first:
    print(f"  expected {k:<15} first attempts {first[k]:>4}  wrong {wrong_first[k]:>3} ({wrong_first[k]/first[k]:.1%})")
print("  confusions (expected -> answered):", dict(conf.most_common(8)))
