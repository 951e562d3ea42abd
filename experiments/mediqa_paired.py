"""Paired comparison of two rankings of the MEDIQA 2019 validation set (issue 8): per-question AP, how many
questions each side wins, and a two-sided paired randomization test (20,000 sign flips, seed 0).

    capr eval --benchmark mediqa2019 --query-field question -r dense --model minilm --run-out a.run
    capr eval --benchmark mediqa2019 --query-field question -r dense --model MODEL --run-out b.run
    .venv/bin/python bench/mediqa_paired.py a.run b.run [mediqa2019-train]   (the set: default mediqa2019)
"""
import sys, random, collections
from capr.corpus.mediqa import read_task3, task3_path
rel = collections.defaultdict(dict)
for ans in read_task3(task3_path('../shared/data', sys.argv[3] if len(sys.argv) > 3 else 'mediqa2019')):
    rel[ans.qid][ans.aid] = int(ans.relevant)
def ap(run):
    out = {}
    for qid, ranked in run.items():
        r = rel[qid]; nrel = sum(r.values()); hits = 0; s = 0
        for i, p in enumerate(ranked, 1):
            if r.get(p): hits += 1; s += hits / i
        out[qid] = s / nrel if nrel else 0
    return out
def load(f):
    d = collections.defaultdict(list)
    for l in open(f):
        q, _, p, rk, *_ = l.split(); d[q].append((int(rk), p))
    return {q: [p for _, p in sorted(v)] for q, v in d.items()}
a = ap(load(sys.argv[1])); b = ap(load(sys.argv[2]))
qs = sorted(a); diff = [b[q] - a[q] for q in qs]
obs = sum(diff) / len(diff)
rng = random.Random(0); n = 20000; cnt = 0
for _ in range(n):
    s = sum(d if rng.random() < .5 else -d for d in diff) / len(diff)
    cnt += abs(s) >= abs(obs) - 1e-12
print(f"MAP {100*sum(a.values())/len(a):.2f} -> {100*sum(b.values())/len(b):.2f}; diff {100*obs:+.2f}; questions better/worse/equal {sum(d>1e-9 for d in diff)}/{sum(d<-1e-9 for d in diff)}/{sum(abs(d)<=1e-9 for d in diff)}; paired randomization p={cnt/n:.3f}")
