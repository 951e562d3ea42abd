"""Saved candidates of the similar-case pipeline: steps 1-2 (mentions, then the encoder's order) written once where
the index is, step 3 (a cross-encoder) run later wherever a model can run, with no index: on an accelerator, or
again and again for several models. Scoring saved candidates gives exactly what :meth:`CasePipeline.rank` gives
with the same settings (both read step 3 through :func:`capr.cases.pipeline.score_groups`), and the distant
supervision of `capr train cases` can be built from them.

The file is JSON lines (gzip'd when its name ends in ``.gz``): a header (the pipeline settings and the index), then each passage's text once
(``{"row", "pid", "text"}``, and ``"encoded"``: what the index's encoder read for it, where that is not the text, as
with a title) before the first question that uses it, and one line per question
(``{"qid", "description", "options", "answer", "source", "hypotheses": [{"found", "fallback", "rows"}]}``; ``rows``:
the supports step 3 reads, in order; empty: the hypothesis is scored on its own text)."""

from __future__ import annotations

import gzip
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from capr.cases.bench import QuestionOutcome
from capr.cases.data import MCQuestion
from capr.cases.pipeline import CasePipeline, score_groups
from capr.errors import BadInputError

CANDIDATES_FORMAT = "capr-case-candidates/1"
Score = Callable[[str, Sequence[str]], np.ndarray]


@dataclass
class CandidateHypothesis:
    found: bool
    fallback: str | None
    rows: list[int]


@dataclass
class CandidateQuestion:
    qid: str
    description: str
    options: list[str]
    answer: int
    source: str
    hypotheses: list[CandidateHypothesis]


@dataclass
class CandidateSet:
    header: dict[str, Any]
    questions: list[CandidateQuestion] = field(default_factory=list)
    texts: dict[int, str] = field(default_factory=dict)
    pids: dict[int, str] = field(default_factory=dict)
    encoded: dict[int, str] = field(default_factory=dict)  # the encoder's input, where it is not the text

    def groups(self, q: CandidateQuestion) -> list[list[str]]:
        """The texts step 3 scores for each option of ``q``, in option order."""
        return self._groups(q, self.texts.__getitem__)

    def encoder_groups(self, q: CandidateQuestion) -> list[list[str]]:
        """:meth:`groups` as the index's encoder read each passage (the dense scorer's view of step 3)."""
        return self._groups(q, lambda r: self.encoded.get(r, self.texts[r]))

    @staticmethod
    def _groups(q: CandidateQuestion, text_of: Callable[[int], str]) -> list[list[str]]:
        # an option no passage supports is scored on its own text
        return [[text_of(r) for r in h.rows] if h.rows else [opt] for opt, h in zip(q.options, q.hypotheses)]

    @property
    def pairs(self) -> int:
        return sum(len(g) for q in self.questions for g in self.groups(q))

    def stats(self) -> dict[str, Any]:
        hyps = [h for q in self.questions for h in q.hypotheses]
        return {"questions": len(self.questions), "options": len(hyps), "options_found": sum(h.found for h in hyps),
                "passages": len({r for h in hyps for r in h.rows})}


def collect_candidates(pipe: CasePipeline, questions: Iterable[MCQuestion],
                       progress: Callable[[Iterable], Iterable] | None = None) -> CandidateSet:
    """Steps 1-2 of ``pipe`` for each question (its own documents excluded, as in evaluation and training). The
    supports kept per option are those step 3 would score: the first ``cross_k``."""
    questions = list(questions)
    cfg = pipe.config
    out = CandidateSet(header={"format": CANDIDATES_FORMAT, "index": str(pipe.index.root), "config": cfg.to_dict()})
    encoded = encoder_text(pipe.index)
    for q in (progress(questions) if progress else questions):
        results, _ = pipe.candidates(q.description, q.options, exclude_docs=q.exclude_docs)
        hyps = []
        for res in results:
            kept = res.supports[: cfg.cross_k]
            for s in kept:
                if s.row not in out.texts:
                    out.texts[s.row], out.pids[s.row] = s.passage.text, s.passage.pid
                    if encoded and (e := encoded(s.passage)) != s.passage.text:
                        out.encoded[s.row] = e
            hyps.append(CandidateHypothesis(res.found, res.fallback, [s.row for s in kept]))
        out.questions.append(CandidateQuestion(q.qid, q.description, list(q.options), q.answer, q.source, hyps))
    return out


def encoder_text(index: Any) -> Callable[[Any], str] | None:
    """What ``index``'s encoder reads for a passage (its title too where the index includes titles); None for an
    index without vectors."""
    if not index.has_dense:
        return None
    from capr.index.segment import passage_index_text

    enc, titles = index.encoder(), index.includes_titles()
    return lambda p: enc.passage_text(p, passage_index_text(p, titles))


def write_candidates(cands: CandidateSet, path: str | Path) -> dict[str, Any]:
    """``cands`` as the file :func:`read_candidates` reads, written atomically; each passage's text once, before
    the first question that uses it."""
    from capr.index.atomic import write_bytes

    buf = io.StringIO()
    buf.write(json.dumps(cands.header) + "\n")
    seen: set[int] = set()
    for q in cands.questions:
        for h in q.hypotheses:
            for r in h.rows:
                if r not in seen:
                    seen.add(r)
                    rec = {"row": r, "pid": cands.pids[r], "text": cands.texts[r]}
                    if r in cands.encoded:
                        rec["encoded"] = cands.encoded[r]
                    buf.write(json.dumps(rec) + "\n")
        buf.write(json.dumps({"qid": q.qid, "description": q.description, "options": q.options, "answer": q.answer,
                              "source": q.source, "hypotheses": [{"found": h.found, "fallback": h.fallback,
                                                                  "rows": h.rows} for h in q.hypotheses]}) + "\n")
    data = buf.getvalue().encode("utf-8")
    write_bytes(Path(path), gzip.compress(data, mtime=0) if str(path).endswith(".gz") else data)
    return cands.stats()


def export_candidates(pipe: CasePipeline, questions: Iterable[MCQuestion], path: str | Path,
                      progress: Callable[[Iterable], Iterable] | None = None) -> dict[str, Any]:
    """:func:`collect_candidates` written to ``path``; returns its counts."""
    return write_candidates(collect_candidates(pipe, questions, progress), path)


def read_candidates(path: str | Path) -> CandidateSet:
    """The file :func:`export_candidates` wrote; a damaged or foreign file is refused naming its line."""
    from capr.corpus.files import read_text

    path = Path(path)
    raw = read_text(path)
    out: CandidateSet | None = None
    for n, line in enumerate(raw.splitlines(), 1):
        try:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"not JSON ({e.msg})") from None
            if out is None:
                if rec.get("format") != CANDIDATES_FORMAT:
                    raise ValueError(f"format {rec.get('format')!r}, expected {CANDIDATES_FORMAT}")
                out = CandidateSet(header=rec)
            elif "row" in rec:
                out.texts[int(rec["row"])] = str(rec["text"])
                out.pids[int(rec["row"])] = str(rec["pid"])
                if "encoded" in rec:
                    out.encoded[int(rec["row"])] = str(rec["encoded"])
            else:
                hyps = [CandidateHypothesis(bool(h["found"]), h.get("fallback"), [int(r) for r in h["rows"]])
                        for h in rec["hypotheses"]]
                if len(hyps) != len(rec["options"]) or not 0 <= int(rec["answer"]) < len(hyps):
                    raise ValueError("options, hypotheses and answer disagree")
                missing = [r for h in hyps for r in h.rows if r not in out.texts]
                if missing:
                    raise ValueError(f"passage row {missing[0]} used before its text")
                out.questions.append(CandidateQuestion(str(rec["qid"]), str(rec["description"]), list(rec["options"]),
                                                       int(rec["answer"]), str(rec.get("source", "")), hyps))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise BadInputError(f"{path}:{n}", str(e)) from None
    if out is None:
        raise BadInputError(str(path), "empty candidates file")
    return out


def score_candidates(cands: CandidateSet, score: Score,
                     progress: Callable[[Iterable], Iterable] | None = None) -> list[QuestionOutcome]:
    """Step 3 over saved candidates: per question the options' scores (the best of each option's texts), as
    :func:`capr.cases.bench.evaluate_cases` records them from :meth:`CasePipeline.rank`."""
    outcomes = []
    for q in (progress(cands.questions) if progress else cands.questions):
        scored = score_groups(q.description, cands.groups(q), score)
        best = [int(np.argmax(s)) for s in scored]
        supports = [cands.pids[h.rows[b]] if h.rows else None for h, b in zip(q.hypotheses, best)]
        outcomes.append(QuestionOutcome(q.qid, [float(s[b]) for s, b in zip(scored, best)], q.answer,
                                        [h.found for h in q.hypotheses], supports))
    return outcomes


def distant_pairs_from_candidates(cands: CandidateSet, score: Score, k: int = 1,
                                  progress: Callable[[Iterable], Iterable] | None = None,
                                  ) -> tuple[list[tuple[str, str, float]], dict[str, Any]]:
    """S+ / S- as :func:`capr.cases.train.distant_pairs` builds them from the index: each option's supports re-ranked
    by the pre-trained cross-encoder ``score``, the best ``k`` paired with the description, labelled by whether the
    option is the correct one; an option with no support gives (description, option)."""
    if k < 1:
        raise ValueError("k must be at least 1")
    pairs: list[tuple[str, str, float]] = []
    found = total = 0
    for q in (progress(cands.questions) if progress else cands.questions):
        groups = cands.groups(q)
        for i, (h, texts, scores) in enumerate(zip(q.hypotheses, groups, score_groups(q.description, groups, score))):
            label = float(i == q.answer)
            total += 1
            found += bool(h.rows)
            order = sorted(range(len(texts)), key=lambda j: (-float(scores[j]), h.rows[j] if h.rows else j))[:k]
            pairs.extend((q.description, texts[j], label) for j in order)
    sources = cands.header.get("sources") or sorted({q.source for q in cands.questions})
    return pairs, {"questions": len(cands.questions), "options": total, "options_found": found,
                   "coverage": round(found / max(1, total), 4), "sources": sources, "k": k,
                   "dense_k": cands.header.get("config", {}).get("dense_k")}


__all__ = ["CANDIDATES_FORMAT", "CandidateSet", "collect_candidates", "distant_pairs_from_candidates",
           "encoder_text", "export_candidates", "read_candidates", "score_candidates", "write_candidates"]
