"""Write the documents of the consumer dev sets (capr.eval.devsets.load_consumer_dev: the MedQuAD documents whose
answers are gold for an RQE consumer question, and the dev sample's documents) as MedQuAD XML files in a folder, so
that `capr adapt FOLDER --out OUT --question-pairs DATA` can be run on them exactly as a user runs it on their own
health articles. The files are copied byte for byte from ../shared/data/medquad/MedQuAD.tar.gz; the medquad-cdv test
documents are never among them.

    OMP_NUM_THREADS=1 .venv/bin/python -m experiments.consumer_corpus --out /work/cache-adapt/consumer-articles

``--untitled``: the documents of consumer-dev instead (each answer alone, no title, no heading), as one JSONL file
(``{"doc_id", "text"}`` per line) — a corpus of untitled notes.
"""
from __future__ import annotations

import argparse
import tarfile
import tempfile
from pathlib import Path

from capr.corpus.medquad import parse_medquad_xml
from capr.corpus.report import ReadReport
from capr.eval.devsets import load_consumer_dev

from experiments.common import DEFAULT_DATA


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--untitled", action="store_true", help="consumer-dev's untitled answers, as a JSONL file")
    args = ap.parse_args()
    if args.untitled:
        import json

        with tempfile.TemporaryDirectory() as tmp:
            data = load_consumer_dev(args.data_dir, Path(tmp) / "idx")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as fh:
            for d in data.extra["documents"]:
                fh.write(json.dumps({"doc_id": d.doc_id, "text": d.text}, ensure_ascii=False) + "\n")
        print(f"{len(data.extra['documents'])} untitled documents written to {args.out}")
        return
    with tempfile.TemporaryDirectory() as tmp:  # lexical index only: the documents are what is wanted
        data = load_consumer_dev(args.data_dir, Path(tmp) / "idx", sections=True)
    wanted = {d.doc_id for d in data.extra["documents"]}
    args.out.mkdir(parents=True, exist_ok=True)
    written = 0
    with tarfile.open(args.data_dir / "medquad" / "MedQuAD.tar.gz", "r:*") as tar:
        for member in tar:
            if not (member.isfile() and member.name.endswith(".xml")):
                continue
            raw = tar.extractfile(member).read()
            subset = Path(member.name).parent.name
            doc = parse_medquad_xml(raw, member.name, ReadReport(skip_bad=True), subset=subset)
            if doc is not None and doc.doc_id in wanted:
                target = args.out / subset / Path(member.name).name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(raw)
                written += 1
                wanted.discard(doc.doc_id)
    print(f"{written} MedQuAD documents written to {args.out}; {len(wanted)} not found")


if __name__ == "__main__":
    main()
