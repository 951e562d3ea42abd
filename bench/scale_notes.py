"""Synthetic clinical notes for bench.scale: headed sections of real sentences, with patients, dates and note types.

    python -m bench.scale_notes --passages 1.24M --out /work/scale-data      # writes notes_<N>_seed0.jsonl + .meta.json

Each note has about six headed sections (HISTORY OF PRESENT ILLNESS, MEDICATIONS, ...) chosen by its note type;
each section is a run of real sentences drawn from the sentences that appear under the same kind of heading in
../shared/data: MTSamples transcriptions (CC0) and MTS-Dialog note sections (CC BY 4.0) by heading, E3C (CC BY-NC)
and CodiEsp (CC BY 4.0) case narratives as history and hospital course. The sentence pools are read once with
capr's readers, segmenter and sentence splitter and cached next to the notes (``pools_v<V>.json.gz``).

Everything is drawn from ``random.Random(seed)``: the same arguments write the same bytes. ``--passages N`` counts
passages as capr cuts them (sections, split at 200 words), estimated from word counts while generating; the exact
number is what the index reports. Metadata per note: ``patient_id`` (about six notes per patient; one patient in
fifty has a twin whose id differs only in case), ``date`` (ISO, 2012–2024), ``note_type``, ``department``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from bench.common import DEFAULT_DATA, log

GENERATOR_VERSION = 1
POOL_VERSION = 1
MAX_PASSAGE_WORDS = 200  # capr's default segmenter: a section longer than this is split between sentences
NOTES_PER_PATIENT = 6
TWIN_EVERY = 50  # one patient in this many has a twin whose id differs from theirs only in case
FIRST_DAY = 15340  # 2012-01-01 as days since 1970-01-01
DAYS = 4749  # to 2024-12-31

# note type -> sections: (heading as written, sentence pool, fewest sentences, most sentences)
NOTE_TYPES: dict[str, tuple[tuple[str, str, int, int], ...]] = {
    "Discharge summary": (
        ("CHIEF COMPLAINT", "chief complaint", 1, 2),
        ("HISTORY OF PRESENT ILLNESS", "history of present illness", 4, 12),
        ("PAST MEDICAL HISTORY", "past medical history", 1, 4),
        ("HOSPITAL COURSE", "hospital course", 5, 16),
        ("DISCHARGE MEDICATIONS", "medications", 1, 5),
        ("DISPOSITION", "plan", 1, 4)),
    "Progress note": (
        ("SUBJECTIVE", "history of present illness", 2, 8),
        ("MEDICATIONS", "medications", 1, 5),
        ("ALLERGIES", "allergies", 1, 2),
        ("PHYSICAL EXAMINATION", "physical examination", 3, 9),
        ("ASSESSMENT", "assessment", 1, 5),
        ("PLAN", "plan", 2, 7)),
    "Consultation": (
        ("REASON FOR CONSULTATION", "chief complaint", 1, 2),
        ("HISTORY OF PRESENT ILLNESS", "history of present illness", 4, 12),
        ("PAST MEDICAL HISTORY", "past medical history", 1, 4),
        ("SOCIAL HISTORY", "social history", 1, 4),
        ("FAMILY HISTORY", "family history", 1, 3),
        ("IMPRESSION", "assessment", 2, 6)),
    "History and physical": (
        ("CHIEF COMPLAINT", "chief complaint", 1, 2),
        ("HISTORY OF PRESENT ILLNESS", "history of present illness", 3, 10),
        ("REVIEW OF SYSTEMS", "review of systems", 2, 7),
        ("MEDICATIONS", "medications", 1, 5),
        ("PHYSICAL EXAMINATION", "physical examination", 3, 9),
        ("ASSESSMENT AND PLAN", "plan", 2, 7)),
    "Operative note": (
        ("PREOPERATIVE DIAGNOSIS", "diagnosis", 1, 2),
        ("POSTOPERATIVE DIAGNOSIS", "diagnosis", 1, 2),
        ("ANESTHESIA", "anesthesia", 1, 2),
        ("INDICATIONS", "indications", 2, 6),
        ("PROCEDURE", "procedure", 4, 15),
        ("FINDINGS", "findings", 1, 5)),
    "Radiology report": (
        ("EXAM", "procedure", 1, 2),
        ("REASON FOR EXAM", "chief complaint", 1, 2),
        ("CLINICAL HISTORY", "history of present illness", 1, 4),
        ("FINDINGS", "findings", 3, 10),
        ("IMPRESSION", "assessment", 1, 4),
        ("RECOMMENDATIONS", "plan", 1, 3)),
}
NOTE_TYPE_WEIGHTS = {"Discharge summary": 3, "Progress note": 5, "Consultation": 2, "History and physical": 2,
                     "Operative note": 1, "Radiology report": 3}

# pool -> the capr aspects (of the source sections' headings) whose sentences fill it, first the closest
POOL_SOURCES: dict[str, tuple[str, ...]] = {
    "chief complaint": ("chief complaint", "reason for exam", "reason for referral", "reason for admission"),
    "history of present illness": ("history of present illness", "brief history", "clinical history",
                                   "case narrative"),
    "hospital course": ("hospital course", "case narrative"),
    "past medical history": ("past medical history", "past surgical history", "problem list"),
    "medications": ("medications", "discharge medications", "medications at home"),
    "allergies": ("allergies",),
    "social history": ("social history", "family/social history"),
    "family history": ("family history", "family/social history"),
    "review of systems": ("review of systems",),
    "physical examination": ("physical examination", "vital signs", "general appearance"),
    "assessment": ("assessment", "assessment and plan", "diagnosis", "final diagnoses"),
    "plan": ("plan", "assessment and plan", "disposition", "discharge instructions", "follow-up"),
    "diagnosis": ("preoperative diagnosis", "postoperative diagnosis", "diagnosis"),
    "anesthesia": ("anesthesia",),
    "indications": ("indications", "indication for surgery", "indications for surgery"),
    "procedure": ("procedure", "procedure detail", "operative procedure in detail", "description of the procedure",
                  "name of operation", "operations"),
    "findings": ("findings", "intraoperative findings", "gross findings"),
}
MIN_POOL = 50  # a pool with fewer sentences borrows the history's

# A sentence that holds "WORD:" (inline) or starts with "Word:" would open a section of its own in capr's reading.
_LABEL_RE = re.compile(r"(?:^|[.!?]\s+)[A-Za-z][A-Za-z0-9 /&\-(),']{0,60}:(?:\s|$)")
_LEADING_LABEL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9 /&\-(),']{0,60}:\s*")  # a section's first sentence holds its heading
_FLATTENED_RE = re.compile(r"\.,(?=\S)")
_WORD_RE = re.compile(r"\w+")


def _clean(sentence: str) -> str | None:
    s = _LEADING_LABEL_RE.sub("", " ".join(sentence.split()), count=1)
    s = _FLATTENED_RE.sub(". ", s)  # MTSamples' line breaks became commas: ".,Next sentence"
    letters = [c for c in s if c.isalpha()]
    if len(letters) < 3 or _LABEL_RE.search(s) or len(s) > 600 or all(c.isupper() for c in letters):
        return None  # an upper-case line would read as a heading
    return s


def _source_sentences(data_dir: Path) -> Iterator[tuple[str, str]]:
    """(aspect, sentence) from every source section, by capr's reading of its heading."""
    from capr.corpus import ReadReport, read_documents
    from capr.corpus.segment import SegmenterConfig, segment
    from capr.text.sentences import split_sentences

    whole = SegmenterConfig(max_tokens=0)
    sources = [("mtsamples", data_dir / "mtsamples" / "mtsamples.csv.gz", None)]
    sources += [("mts-dialog", p, None) for p in sorted((data_dir / "mts_dialog").glob("MTS-Dialog-*.csv*"))]
    sources += [("e3c", data_dir / "e3c_english" / "cases.jsonl.gz", "case narrative"),
                ("codiesp", data_dir / "codiesp" / "cases.jsonl.gz", "case narrative")]
    for fmt, path, aspect in sources:
        if not path.is_file():
            sys.exit(f"bench.scale_notes: {path} not found (pass --data-dir; see its SOURCE.md)")
        n = 0
        for doc in read_documents(path, fmt, ReadReport(skip_bad=True)):
            for p in segment(doc, whole):
                a = aspect or p.aspect or ""
                for s, e in split_sentences(doc.text, p.start, p.end):
                    yield a, doc.text[s:e]
                    n += 1
        log(f"  {path.name}: {n:,} sentences")


def load_pools(data_dir: Path, cache_dir: Path) -> dict[str, list[str]]:
    """Sentence pools by POOL_SOURCES name, built once from ../shared/data and cached under ``cache_dir``."""
    path = cache_dir / f"pools_v{POOL_VERSION}.json.gz"
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            return json.load(fh)
    log(f"sentence pools: reading {data_dir} ...")
    by_aspect: dict[str, dict[str, None]] = {}
    for aspect, sentence in _source_sentences(data_dir):
        s = _clean(sentence)
        if s:
            by_aspect.setdefault(aspect, {})[s] = None  # dict: distinct sentences, first-seen order
    pools = {name: list(dict.fromkeys(s for a in aspects for s in by_aspect.get(a, {})))
             for name, aspects in POOL_SOURCES.items()}
    for name, sentences in pools.items():
        if len(sentences) < MIN_POOL:
            pools[name] = sentences + pools["history of present illness"]
    pools["_keywords"] = _keywords(data_dir)
    pools["_descriptions"] = _descriptions(data_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as fh:
        json.dump(pools, fh)
    os.replace(tmp, path)
    log("sentence pools: " + ", ".join(f"{k} {len(v):,}" for k, v in pools.items()))
    return pools


def _mtsamples_rows(data_dir: Path) -> Iterator[dict[str, str]]:
    import csv

    with gzip.open(data_dir / "mtsamples" / "mtsamples.csv.gz", "rt", encoding="utf-8", newline="") as fh:
        yield from csv.DictReader(fh)


def _keywords(data_dir: Path) -> list[str]:
    """Entities for ⟨entity, aspect⟩ queries: MTSamples' keyword phrases (2-4 words) that are not specialties."""
    specialties = set()
    counts: dict[str, int] = {}
    for row in _mtsamples_rows(data_dir):
        specialties.add(row["medical_specialty"].strip().lower())
        for k in (row.get("keywords") or "").split(","):
            k = " ".join(k.split()).lower()
            if 2 <= len(k.split()) <= 4 and k.replace(" ", "").isalpha():
                counts[k] = counts.get(k, 0) + 1
    common = sorted((-c, k) for k, c in counts.items() if k not in specialties)
    return sorted(k for i, (c, k) in enumerate(common) if -c >= 3 or i < 20)  # a small sample keeps its top 20


def _descriptions(data_dir: Path) -> list[str]:
    """Free-text queries: MTSamples' one-line descriptions of their notes."""
    out = {" ".join(row["description"].split()): None for row in _mtsamples_rows(data_dir)}
    return sorted(d for d in out if 4 <= len(d.split()) <= 25)


def patient_id(p: int) -> str:
    """The id of patient number ``p``: MRN-style, upper case; a twin (p % TWIN_EVERY == 1) is the previous
    patient's id in lower case, so that the two differ only in case."""
    if p % TWIN_EVERY == 1:
        return patient_id(p - 1).lower()
    n, digits = p * 7919 + 1_000_003, ""
    while n:
        n, r = divmod(n, 36)
        digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"[r] + digits
    return f"MRN{digits:0>7}"


def iso_day(days: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(days * 86400))


def passages_of(section_words: list[int]) -> int:
    """How many passages capr's segmenter cuts a section of sentences with these word counts into (roughly:
    it fills a passage sentence by sentence up to MAX_PASSAGE_WORDS words; the heading line counts too)."""
    n, fill = 1, 0
    for w in section_words:
        if fill and fill + w > MAX_PASSAGE_WORDS:
            n, fill = n + 1, 0
        fill += w
    return n


class NoteMaker:
    """Notes drawn one after another from one random stream (deterministic for a seed)."""

    def __init__(self, pools: dict[str, list[str]], seed: int, n_patients: int) -> None:
        self.pools = pools
        self.rng = random.Random(seed)
        self.n_patients = max(2, n_patients)
        self.types = list(NOTE_TYPE_WEIGHTS)
        self.weights = [NOTE_TYPE_WEIGHTS[t] for t in self.types]
        self.words = {name: [len(_WORD_RE.findall(s)) for s in pool] for name, pool in pools.items()
                      if not name.startswith("_")}

    def note(self, doc_id: str) -> tuple[dict[str, Any], int]:
        """One note as a JSON object, and the passages capr is expected to cut it into."""
        rng = self.rng
        note_type = rng.choices(self.types, self.weights)[0]
        parts, n_passages = [], 0
        for heading, pool_name, lo, hi in NOTE_TYPES[note_type]:
            pool, words = self.pools[pool_name], self.words[pool_name]
            picks = [rng.randrange(len(pool)) for _ in range(rng.randint(lo, hi))]
            parts.append(f"{heading}:\n" + " ".join(pool[i] for i in picks))
            n_passages += passages_of([len(heading.split())] + [words[i] for i in picks])
        p = rng.randrange(self.n_patients)
        return ({"doc_id": doc_id, "title": note_type, "text": "\n\n".join(parts), "patient_id": patient_id(p),
                 "date": iso_day(FIRST_DAY + rng.randrange(DAYS)), "note_type": note_type,
                 "department": DEPARTMENTS[p % len(DEPARTMENTS)]}, n_passages)


DEPARTMENTS = ("Cardiology", "Internal Medicine", "Neurology", "Orthopedics", "General Surgery", "Gastroenterology",
               "Pulmonology", "Nephrology", "Emergency", "Obstetrics and Gynecology", "Urology", "Oncology")
PASSAGES_PER_NOTE = 6.2  # for sizing the patient population only; the note count follows the running estimate


def corpus_paths(out_dir: Path, passages: int, seed: int) -> tuple[Path, Path]:
    stem = out_dir / f"notes_{passages}_seed{seed}"
    return stem.with_suffix(".jsonl"), stem.with_suffix(".meta.json")


def generate(out_dir: Path, passages: int, seed: int = 0, data_dir: Path = DEFAULT_DATA) -> dict[str, Any]:
    """Writes (or finds, when already written by the same generator) the notes file for ``passages`` passages;
    returns its meta: notes, estimated passages, text bytes, patients, the file's path."""
    path, meta_path = corpus_paths(out_dir, passages, seed)
    key = {"generator": GENERATOR_VERSION, "pools": POOL_VERSION, "passages": passages, "seed": seed}
    if path.is_file() and meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("key") == key:
            return meta
    pools = load_pools(Path(data_dir), out_dir)
    n_patients = max(2, round(passages / PASSAGES_PER_NOTE / NOTES_PER_PATIENT))
    maker = NoteMaker(pools, seed, n_patients)
    t0 = time.perf_counter()
    notes = est = text_bytes = 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        while est < passages:
            rec, n = maker.note(f"note-{notes:09d}")
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            text_bytes += len(rec["text"].encode("utf-8"))
            notes += 1
            est += n
            if notes % 100_000 == 0:
                log(f"  {notes:,} notes, ~{est:,} passages ({time.perf_counter() - t0:.0f} s)")
    os.replace(tmp, path)
    meta = {"key": key, "path": str(path), "notes": notes, "estimated_passages": est, "text_bytes": text_bytes,
            "file_bytes": path.stat().st_size, "patients": n_patients, "seconds": round(time.perf_counter() - t0, 1)}
    meta_path.write_text(json.dumps(meta, indent=1))
    log(f"wrote {path} ({notes:,} notes, ~{est:,} passages, {text_bytes / 2**20:,.0f} MB of text) in {meta['seconds']} s")
    return meta


def extra_notes(pools: dict[str, list[str]], count: int, seed: int, n_patients: int, prefix: str) -> list[dict]:
    """``count`` more notes with their own ids (the add batch), from their own random stream."""
    maker = NoteMaker(pools, seed, n_patients)
    return [maker.note(f"{prefix}{i:09d}")[0] for i in range(count)]


def make_queries(pools: dict[str, list[str]], meta: dict[str, Any], count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` queries of each kind: free text (an MTSamples note description), ⟨entity, aspect⟩ (an MTSamples
    keyword and an aspect of the notes), and each of those scoped to one patient of the corpus."""
    rng = random.Random(seed + 7)
    aspects = sorted({pool for sections in NOTE_TYPES.values() for _, pool, _, _ in sections
                      if pool in ("medications", "history of present illness", "plan", "assessment", "allergies",
                                  "physical examination", "past medical history", "hospital course", "findings")})
    out: list[dict[str, Any]] = []
    for i in range(count):
        patient = patient_id(rng.randrange(meta["patients"]))
        text = rng.choice(pools["_descriptions"])
        entity, aspect = rng.choice(pools["_keywords"]), rng.choice(aspects)
        out += [{"kind": "free text", "text": text},
                {"kind": "entity+aspect", "entity": entity, "aspect": aspect},
                {"kind": "free text, one patient", "text": text, "filters": {"patient_id": patient}},
                {"kind": "entity+aspect, one patient", "entity": entity, "aspect": aspect,
                 "filters": {"patient_id": patient}}]
    return out


def parse_count(value: str) -> int:
    """'1M', '1.24M', '300k' or '1243675'."""
    v = value.strip().lower().replace("_", "").replace(",", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(v[-1:], 1)
    try:
        return int(round(float(v.rstrip("km")) * scale))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a count: {value!r} (e.g. 1M, 1.24M, 300k)") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passages", type=parse_count, required=True, help="passages as capr cuts them (1M, 300k, ...)")
    ap.add_argument("--out", type=Path, default=Path("/work/scale-data"), help="folder for the notes and pools")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(generate(args.out, args.passages, args.seed, args.data_dir), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
