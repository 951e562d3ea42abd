"""Choose CDV's free-boundary thresholds on the trainer's held-out dev documents (never on test data).

For every dev document and aspect, query ⟨title, aspect⟩ on that document; the span grown around the document's
best sentence (as `capr search --boundaries free` grows it around a retrieved passage's best sentence) is compared
with the document's passages carrying the aspect (character-overlap F1, sentence lengths as characters). Prints
the grid, best first.

    .venv/bin/python -m experiments.cdv_boundaries_dev --model /work/runs/cdv_B_static --labels /work/runs/mq_train.jsonl
"""

from __future__ import annotations

import argparse

import numpy as np

from capr.cdv import CDVModel
from capr.cdv.data import documents_from_labels
from capr.cdv.model import sentence_scores
from capr.cdv.spans import BoundaryConfig, char_f1, grow_span
from capr.cdv.trainer import dev_documents
from capr.labels.generate import read_labels


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--labels", required=True)
    ap.add_argument("--max-queries", type=int, default=400)
    a = ap.parse_args()
    model = CDVModel.load(a.model)
    args = model.args
    docs = dev_documents(documents_from_labels(read_labels(a.labels)), args)
    vecs = model.encode_documents(docs)
    queries = []
    for d, (e, asp) in zip(docs, vecs):
        lengths = np.asarray([len(t) + 1 for t in d.texts])
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        for aspect in dict.fromkeys(d.aspects):
            if not d.titles[0] or not aspect:
                continue
            gold = [j for j, x in enumerate(d.aspects) if x == aspect]
            spans = []
            for j in gold:
                rows = np.flatnonzero(d.passage_of == j)
                spans.append((int(starts[rows[0]]), int(starts[rows[-1]] + lengths[rows[-1]])))
            queries.append((d.titles[0], aspect, e, asp, starts, lengths, spans))
    queries = queries[: a.max_queries]
    texts = sorted({t for q in queries for t in q[:2]})
    lv = dict(zip(texts, model.label_vectors(texts)))
    scores = [sentence_scores(e, asp, lv[t], lv[x])["combined"] for t, x, e, asp, *_ in queries]
    rows = []
    for open_ in (0.0, 0.5, 0.8, 0.9):
        for close in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
            if close > open_:
                continue
            cfg = BoundaryConfig(open_, close)
            f1s = []
            for s, (_, _, _, _, starts, lengths, gold) in zip(scores, queries):
                sp = grow_span(s, int(np.argmax(s)), cfg)
                pred = (int(starts[sp.first]), int(starts[sp.end - 1] + lengths[sp.end - 1]))
                f1s.append(max(char_f1(pred, g) for g in gold))
            rows.append((100 * float(np.mean(f1s)), open_, close))
    print(f"{len(queries)} dev queries from {len(docs)} dev documents ({a.model})")
    print("| θ_open | θ_close | free-span F1 |\n|---|---|---|")
    for f1, o, c in sorted(rows, reverse=True):
        print(f"| {o} | {c} | {f1:.2f} |")


if __name__ == "__main__":
    main()
