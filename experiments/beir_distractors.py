#!/usr/bin/env python3
"""A BEIR folder made larger: its corpus plus documents read from other files as distractors (unjudged), its queries
and judgements as they are. Settings that depend on the index's size (capr.search.query_weights: how rare a question's words
are) can then be checked at a size the dev sets do not have, on the same questions.

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.beir_distractors ../shared/data/nfcorpus_dev OUT \
        ../shared/data/medquad/MedQuAD.tar.gz ../shared/data/e3c_english/cases.jsonl.gz
    CAPR_CACHE=... .venv/bin/python -m experiments.free_text_dev --sets beir:OUT --variants "default,rrf 1:1" --dump D

Distractor ids get the prefix ``distractor:`` so none can collide with a judged document; a repeated id is kept once.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from capr.corpus import read_documents
from capr.corpus.beir import beir_file, beir_folder, read_beir_corpus
from capr.corpus.report import ReadReport


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path, help="a BEIR folder")
    ap.add_argument("out", type=Path, help="the larger BEIR folder to write")
    ap.add_argument("distractors", type=Path, nargs="+", help="files or folders capr index reads")
    args = ap.parse_args()
    folder = beir_folder(args.folder)
    args.out.mkdir(parents=True, exist_ok=True)
    counts = {"judged corpus": 0, "distractors": 0}
    seen: set[str] = set()
    with open(args.out / "corpus.jsonl", "w") as out:
        for d in read_beir_corpus(folder, ReadReport()):
            out.write(json.dumps({"_id": d.doc_id, "title": d.title, "text": d.text}) + "\n")
            counts["judged corpus"] += 1
        for path in args.distractors:
            for d in read_documents(path, report=ReadReport(skip_bad=True)):
                if d.text.strip() and f"distractor:{d.doc_id}" not in seen:  # MedQuAD repeats some ids
                    seen.add(f"distractor:{d.doc_id}")
                    out.write(json.dumps({"_id": f"distractor:{d.doc_id}", "title": d.title, "text": d.text}) + "\n")
                    counts["distractors"] += 1
    queries = beir_file(folder, "queries")
    shutil.copyfile(queries, args.out / queries.name)
    shutil.copytree(folder / "qrels", args.out / "qrels", dirs_exist_ok=True)
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
