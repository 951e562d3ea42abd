"""Labelled training questions as a memory of similar cases (issue 34): each question of a held-out set is matched by
BM25 (bm25s) against the vignettes of the labelled training questions (medqa-train, headqa-train, medmcqa-train),
and an option scores as the most similar training vignette whose correct answer is that option (same words, case
and punctuation folded). Prints, per set, the share of options some training answer names, the questions with at
least one such option, and the accuracy on those questions (arg-max over the covered options).

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.cases_memory --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

import numpy as np

from capr.cases.data import load_questions

TRAIN = ("medqa-train", "headqa-train", "medmcqa-train")
HELD_OUT = ("medqa-heldout", "headqa-dev", "medmcqa-heldout")


def _answer_key(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]", " ", text.lower()).split())


def main() -> None:
    import bm25s

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default="../shared/data")
    args = ap.parse_args()
    train = [q for name in TRAIN for q in load_questions(args.data_dir, name)]
    answered = defaultdict(list)
    for i, q in enumerate(train):
        answered[_answer_key(q.options[q.answer])].append(i)
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize([q.description for q in train], stopwords="en", show_progress=False),
                    show_progress=False)
    print(f"memory: {len(train)} labelled training questions ({', '.join(TRAIN)})")
    print("| set | questions | options a training answer names | questions with one | accuracy on those |")
    print("|---|---:|---:|---:|---:|")
    for name in HELD_OUT:
        questions = load_questions(args.data_dir, name)
        covered = decided = correct = 0
        for q in questions:
            docs, scores = retriever.retrieve(bm25s.tokenize([q.description], stopwords="en", show_progress=False),
                                              k=len(train), show_progress=False)
            score_of = dict(zip(docs[0].tolist(), scores[0].tolist()))
            options = [max((score_of.get(i, 0.0) for i in answered.get(_answer_key(o), [])), default=None)
                       for o in q.options]
            covered += sum(o is not None for o in options)
            if any(o is not None for o in options):
                decided += 1
                correct += int(np.argmax([-1.0 if o is None else o for o in options])) == q.answer
        print(f"| {name} | {len(questions)} | {100 * covered / sum(len(q.options) for q in questions):.1f} % | "
              f"{decided} | {100 * correct / max(decided, 1):.1f} |")


if __name__ == "__main__":
    main()
