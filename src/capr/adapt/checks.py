"""The dev checks `capr adapt`'s gate scores every candidate model on: held-out self-labelled queries (what training
should improve) and free-text checks (what it must not make worse). Each check is a set of queries, each with a
list of candidate passages and graded relevance; a model is scored exactly as an index built with it would read
queries and passages (capr's Encoder: markers, document context from the model card)."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from capr.corpus.files import parse_json
from capr.errors import BadInputError
from capr.eval.metrics import candidate_metrics, per_query
from capr.labels.generate import LabeledPassage
from capr.labels.gazetteer import normalize_name

SELF = "self"  # the gate's "must beat the start model" side
FREE_TEXT = "free-text"  # the "must not be worse than the start model" side
REPORTED = "reported"  # shown in the report, not part of the decision


@dataclass
class CheckPassage:
    """What an encoder reads for a candidate (the attributes of capr's Passage that Encoder.passage_text uses)."""

    text: str
    title: str = ""
    heading: str = ""


@dataclass
class DevCheck:
    name: str
    side: str  # SELF | FREE_TEXT
    description: str
    queries: list[str]
    pool: list[CheckPassage]
    candidates: list[list[int]]  # pool indices per query
    relevance: list[list[float]]  # graded (0 = not relevant) per candidate
    primary: str = "MAP"
    _lexical: list[np.ndarray] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.queries)

    def lexical_scores(self) -> list[np.ndarray]:
        """BM25 scores of each query's candidates, as an index's lexical side scores them (capr's analyzer; the
        statistics of this check's pool; passages read with title, as indexed). The same for every model."""
        if self._lexical is None:
            import bm25s

            from capr.text.analyzer import Analyzer, AnalyzerConfig
            from capr.index.segment import passage_index_text

            analyzer = Analyzer(AnalyzerConfig())
            bm25 = bm25s.BM25()
            bm25.index([analyzer(passage_index_text(p, include_title=True)) or ["_"] for p in self.pool],
                       show_progress=False)
            self._lexical = []
            for q, cands in zip(self.queries, self.candidates):
                terms = [t for t in analyzer(q) if t in bm25.vocab_dict]
                every = bm25.get_scores(terms) if terms else np.zeros(len(self.pool))
                self._lexical.append(np.asarray(every, dtype=np.float64)[cands])
        return self._lexical


def dense_scores(encoder: Any, check: DevCheck) -> list[np.ndarray]:
    """Cosine of each query with each of its candidates under `encoder` (a capr.models.encoder.Encoder), passages
    read as an index built with this encoder reads them: with the model's document context, else title + text."""
    from capr.index.segment import passage_index_text

    qv = encoder.encode_queries(check.queries)
    pv = encoder.encode_passages([encoder.passage_text(p, passage_index_text(p, include_title=True))
                                  for p in check.pool])
    sims = qv @ pv.T
    return [sims[i, c] for i, c in enumerate(check.candidates)]


def check_metrics(check: DevCheck, dense: Sequence[np.ndarray], fusion: Any = None) -> dict[str, np.ndarray]:
    """Per-query metrics of a ranking by the dense scores alone (``fusion`` None), or by the hybrid first stage's
    fusion (a capr.search.fusion.FusionConfig) of BM25 and those dense scores, as the index would search."""
    if fusion is None:
        return candidate_metrics(dense, check.relevance)
    from capr.search.fusion import fuse_aligned

    fused = [fuse_aligned([lex, np.asarray(d, dtype=np.float64)], fusion) for lex, d in zip(check.lexical_scores(), dense)]
    return candidate_metrics(fused, check.relevance)


def reranked_check_metrics(check: DevCheck, dense: Sequence[np.ndarray], fusion: Any, reranker: Any,
                           depth: int) -> dict[str, np.ndarray]:
    """Per-query metrics when ``reranker`` re-orders the top ``depth`` of the hybrid first stage's ranking (as
    ``capr search --reranker`` does for a free-text query, fused with the first stage's rank at the re-ranker's
    default share; the rest keep their order)."""
    from capr.index.segment import passage_index_text
    from capr.search.fusion import fuse_aligned
    from capr.search.second_stage import rerank_scores, rerank_share, score_passages

    share = rerank_share(reranker, None)
    out = []
    for query, cands, lex, d in zip(check.queries, check.candidates, check.lexical_scores(), dense):
        fused = fuse_aligned([lex, np.asarray(d, dtype=np.float64)], fusion)
        passages = [check.pool[c] for c in cands]

        def score_top(top: list[int], query: str = query, passages: list = passages) -> np.ndarray:
            chosen = [passages[i] for i in top]
            return score_passages(reranker, query, chosen, [passage_index_text(p, include_title=True) for p in chosen])

        out.append(rerank_scores(fused, score_top, depth, share, fusion.rrf_k))
    return candidate_metrics(out, check.relevance)


# --------------------------------------------------------------------------- checks from the corpus itself
def _pool(dev: Sequence[LabeledPassage], n: int, rng: random.Random) -> list[LabeledPassage]:
    idx = list(range(len(dev)))
    rng.shuffle(idx)
    return [dev[k] for k in idx[:n]]


def self_labelled_check(dev: Sequence[LabeledPassage], n_queries: int = 256, pool_size: int = 512,
                        n_candidates: int = 32, titles: bool = True, seed: int = 0,
                        side: str | None = None) -> DevCheck | None:
    """⟨entity, aspect⟩ queries over held-out documents; candidates: the pool's BM25 best for the query (often
    the same entity or aspect) topped up at random. `titles=False` reads every passage without its document title
    (corpora without titles must not lose what the model learned)."""
    import bm25s

    from capr.text.analyzer import Analyzer, AnalyzerConfig

    rng = random.Random(seed)
    pool = _pool(dev, pool_size, rng)
    if len(pool) < 4:
        return None
    analyzer = Analyzer(AnalyzerConfig())
    sets = [{normalize_name(e) for e in lp.entities} for lp in pool]
    bm25 = bm25s.BM25()
    bm25.index([analyzer(lp.text) or ["_"] for lp in pool], show_progress=False)
    queries, cands, rel = [], [], []
    for j in range(min(n_queries, len(pool))):
        lp = pool[j]
        entity = lp.entities[0]
        query = f"{entity} {lp.aspect}"
        hits, _ = bm25.retrieve([analyzer(query) or ["_"]], k=min(len(pool), n_candidates), show_progress=False,
                                n_threads=1)
        group = [j] + [int(k) for k in hits[0] if int(k) != j][: n_candidates // 2]
        taken = set(group)
        rest = [k for k in range(len(pool)) if k not in taken]
        group += rng.sample(rest, min(len(rest), n_candidates - len(group)))
        queries.append(query)
        cands.append(group)
        rel.append([float(pool[k].aspect == lp.aspect and normalize_name(entity) in sets[k]) for k in group])
    passages = [CheckPassage(lp.text, lp.title if titles else "", lp.heading if titles else "") for lp in pool]
    name = "held-out labels" + ("" if titles else ", no titles")
    return DevCheck(name, side or (SELF if titles else FREE_TEXT),
                    f"{len(queries)} ⟨entity, aspect⟩ queries over {len(pool)} held-out passages"
                    + ("" if titles else " read without their titles"), queries, passages, cands, rel, primary="MRR")


_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(])")


def inverse_cloze_check(dev: Sequence[LabeledPassage], n_queries: int = 256, pool_size: int = 512,
                        seed: int = 1) -> DevCheck | None:
    """Free text without any label (the inverse cloze task): a sentence of a held-out passage is the query, and
    the rest of that passage, read without its title, must be found among the pool. It measures general
    sentence-to-passage matching, which the start model has and tuple training can erode."""
    rng = random.Random(seed)
    pool = _pool(dev, pool_size, rng)
    passages, queries, targets = [], [], []
    for lp in pool:
        sents = [s for s in _SENTENCE_RE.split(lp.text) if s.strip()]
        usable = [k for k, s in enumerate(sents) if 6 <= len(s.split()) <= 40]
        if len(sents) >= 3 and usable and len(queries) < n_queries:
            k = rng.choice(usable)
            queries.append(sents[k])
            targets.append(len(passages))
            passages.append(CheckPassage(" ".join(sents[:k] + sents[k + 1:])))
        else:
            passages.append(CheckPassage(lp.text))
    if len(queries) < 8:
        return None
    everything = list(range(len(passages)))
    rel = [[float(k == t) for k in everything] for t in targets]
    return DevCheck("inverse cloze", FREE_TEXT,
                    f"{len(queries)} sentences of held-out passages, each finding the rest of its passage among "
                    f"{len(passages)} (no titles)", queries, passages, [everything] * len(queries), rel, primary="MRR")


@dataclass
class SearchedCheck:
    """Held-out ⟨entity, aspect⟩ queries searched exactly as ``capr search`` searches the adapted index: a small
    index of whole held-out documents built with the candidate model, searched by the one Searcher with its default
    options (entity tiers, aspect prior, mention bonus, the hybrid fusion). The re-ranking checks above score a
    model on a candidate pool with BM25 fused in; on a corpus where the entity tiers and the aspect prior already
    rank the right section first, they report gains that the index cannot show. A hit is relevant when its
    document's section of the asked aspect names the entity (the labels' own definition)."""

    name: str
    side: str
    description: str
    queries: list[tuple[str, str]]  # (entity, aspect)
    relevant: list[set[tuple[str, str]]]  # (doc_id, aspect) sections that answer each query
    documents: list[Any]  # capr.records.Document
    max_tokens: int
    primary: str = "MRR"
    depth: int = 10
    labeled_passages: int = 0  # of the documents (their index holds these and any unlabeled passage)

    def __len__(self) -> int:
        return len(self.queries)

    def build(self, model: str, folder: str | Path) -> Path:
        """The check's index, built with ``model`` as ``capr adapt`` builds the final one (titles in front)."""
        import shutil

        from capr.corpus.segment import SegmenterConfig
        from capr.index.writer import IndexWriter
        from capr.models.encoder import EncoderConfig

        folder = Path(folder)
        shutil.rmtree(folder, ignore_errors=True)
        with IndexWriter(folder, SegmenterConfig(max_tokens=self.max_tokens), dense=EncoderConfig(model=model)) as w:
            for doc in self.documents:
                w.add(doc)
        return folder

    def metrics(self, folder: str | Path, fusion: Any = None, retriever: Any = None,
                reranker: Any = None) -> dict[str, np.ndarray]:
        """Per-query P@1, MRR, MAP and nDCG@10 (×100, capr.eval.metrics) of the Searcher's top 10 on the index in ``folder``;
        ``fusion`` (a FusionConfig) and ``retriever`` replace the default pipeline's; ``reranker``: a second stage."""
        from capr.errors import QueryError
        from capr.index import load_index
        from capr.records import Query
        from capr.search import SearchOptions, Searcher

        index = load_index(folder)
        searcher = Searcher(index, reranker=reranker)
        every = index.passages(np.arange(index.row_count(), dtype=np.int64))
        sections = [(p.doc_id, p.aspect or "") for p in every]
        options = SearchOptions(k=self.depth, fusion=fusion, retriever=retriever, highlights=False)
        relevant_rows = [[p.pid for p, s in zip(every, sections) if s in rel] for rel in self.relevant]
        run: dict[str, dict[str, float]] = {}
        for n, (entity, aspect) in enumerate(self.queries):
            try:
                pq = searcher.parse(Query(str(n), entity=entity, aspect=aspect), validate=False)
                hits = searcher.search(pq, options).hits
            except QueryError:  # nothing searchable in it (the same for every candidate): a miss
                hits = []
            run[str(n)] = {h.pid: float(len(hits) - h.rank) for h in hits}  # the Searcher's order
        qrels = {str(n): {pid: 1 for pid in rows} for n, rows in enumerate(relevant_rows)}
        scores = per_query(run, qrels)
        return {m: 100 * np.asarray([scores[str(n)][m] for n in range(len(self.queries))]) for m in ("P@1", "MRR", "MAP", "nDCG@10")}


def searched_labels_check(held_out: Sequence[LabeledPassage], documents: Sequence[Any], max_tokens: int,
                          n_queries: int = 192, max_passages: int = 600, seed: int = 2) -> SearchedCheck | None:
    """⟨entity, aspect⟩ queries of held-out documents, searched over an index of those documents (whole, as they
    would be indexed), at most about ``max_passages`` labeled passages of them."""
    rng = random.Random(seed)
    by_doc: dict[str, list[LabeledPassage]] = {}
    for lp in held_out:
        by_doc.setdefault(lp.doc_id, []).append(lp)
    docs: dict[str, Any] = {}
    for d in documents:
        if d.doc_id in by_doc:
            docs.setdefault(d.doc_id, d)  # a repeated id: the first is what the index holds
    ids = sorted(docs)
    rng.shuffle(ids)
    chosen, passages = [], 0
    for doc_id in ids:
        if chosen and passages + len(by_doc[doc_id]) > max_passages:
            continue
        chosen.append(doc_id)
        passages += len(by_doc[doc_id])
    labeled = [lp for d in chosen for lp in by_doc[d]]
    asked = list(dict.fromkeys((lp.entities[0], lp.aspect) for lp in labeled if lp.entities and lp.aspect))
    rng.shuffle(asked)
    asked = asked[:n_queries]
    if len(asked) < 8:
        return None
    names = [{normalize_name(e) for e in lp.entities} for lp in labeled]
    relevant = [{(lp.doc_id, lp.aspect) for lp, named in zip(labeled, names)
                 if lp.aspect == aspect and normalize_name(entity) in named}
                for entity, aspect in asked]
    return SearchedCheck("held-out labels, searched", SELF,
                         f"{len(asked)} ⟨entity, aspect⟩ queries searched as `capr search` does over an index of "
                         f"{len(chosen)} held-out documents", asked, relevant, [docs[d] for d in chosen], max_tokens,
                         labeled_passages=len(labeled))


# --------------------------------------------------------------------------- free-text sets a user supplies
def judged_answers_check(name: str, groups: Iterable[tuple[str, list[tuple[str, float]]]]) -> DevCheck:
    """Questions, each with judged answers (text, grade; grade > 0 means relevant): the MEDIQA 2019 Task 3 shape."""
    queries, pool, cands, rel = [], [], [], []
    for question, answers in groups:
        if not answers or not any(g > 0 for _, g in answers):
            continue
        queries.append(question)
        cands.append(list(range(len(pool), len(pool) + len(answers))))
        pool += [CheckPassage(text) for text, _ in answers]
        rel.append([float(g) for _, g in answers])
    return DevCheck(name, FREE_TEXT, f"{len(queries)} free-text questions re-ranking {len(pool)} judged answers",
                    queries, pool, cands, rel, primary="MAP")


def mediqa_check(data_dir: str | Path, name: str = "mediqa2019-train") -> DevCheck:
    """MEDIQA 2019 Task 3 judged answers (training set 2 by default: a dev set; the validation set stays for
    reporting). Relevance as in the shared task: reference score 3 or 4."""
    from capr.corpus.mediqa import read_task3, task3_path

    path = task3_path(data_dir, name)
    if not path.exists():
        raise BadInputError(str(path), f"the {name} free-text dev set is not there")
    grouped: dict[str, tuple[str, list[tuple[str, float]]]] = {}
    for a in read_task3(path):
        grouped.setdefault(a.qid, (a.question, []))[1].append((a.text, float(a.relevant)))
    return judged_answers_check(name, grouped.values())


def jsonl_check(path: str | Path) -> DevCheck:
    """A user's free-text dev set: JSONL lines {"question": str, "answers": [{"text": str, "relevance": number}]}."""
    path = Path(path)
    groups = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise BadInputError(str(path), f"cannot read the free-text dev set: {e}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = parse_json(line, one_line=True)
            answers = [(str(a["text"]), float(a.get("relevance", 0))) for a in rec["answers"]]
            question = str(rec["question"])
        except (ValueError, KeyError, TypeError) as e:
            expected = '{"question": ..., "answers": [{"text": ..., "relevance": ...}]}'
            raise BadInputError(str(path), f"expected {expected} ({type(e).__name__}: {e})", f"line {n}") from None
        groups.append((question, answers))
    check = judged_answers_check(path.stem, groups)
    if not check.queries:
        raise BadInputError(str(path), "no question with a relevant answer")
    return check


def beir_check(folder: str | Path, name: str | None = None) -> DevCheck:
    """A BEIR folder's questions ranking its whole corpus (each question's candidates are every document; graded
    judgements): a free-text set from another source than the model's training data (MedicationQA's consumer
    medication questions over pharmacists' answers; NFCorpus)."""
    from capr.corpus.beir import beir_folder, read_beir_corpus, read_beir_qrels, read_beir_queries
    from capr.corpus.report import ReadReport
    from capr.eval.beir import default_split

    root = beir_folder(folder)
    qrels = read_beir_qrels(root, default_split(root))
    docs = list(read_beir_corpus(root, ReadReport(skip_bad=True)))
    row = {d.doc_id: i for i, d in enumerate(docs)}
    grades: dict[str, dict[int, float]] = {}
    for q in qrels:
        if q.pid in row:
            grades.setdefault(q.qid, {})[row[q.pid]] = float(q.relevance)
    queries = [q for q in read_beir_queries(root, set(grades)) if any(g > 0 for g in grades[q.qid].values())]
    every = list(range(len(docs)))
    return DevCheck(name or root.name, FREE_TEXT, f"{len(queries)} free-text questions ranking all {len(docs)} "
                    f"documents of {root.name}", [q.text or "" for q in queries],
                    [CheckPassage(d.text, d.title) for d in docs], [every] * len(queries),
                    [[grades[q.qid].get(i, 0.0) for i in every] for q in queries], primary="nDCG@10")


# registered BEIR folders of the data folder: free-text sets from outside the question pairs' sources
OUTSIDE_SETS = {"medicationqa-dev": "medicationqa_dev", "nfcorpus-dev": "nfcorpus_dev"}


def outside_sets(question_pairs: str | None, free_text: Sequence[str], data_dir: str | None) -> tuple[str, ...]:
    """Question pairs come from MedQuAD, RQE and MQP, whose wording a model learns (issue 53): a model trained on
    them is also checked on questions of another source — MedicationQA's dev half, when the data folder has it —
    unless the caller named such a set."""
    if not question_pairs or any(s in OUTSIDE_SETS or s.startswith("beir:") for s in free_text):
        return ()
    folder = Path(data_dir or question_pairs)
    return ("medicationqa-dev",) if (folder / OUTSIDE_SETS["medicationqa-dev"]).is_dir() else ()


def free_text_check(spec: str, data_dir: str | Path | None) -> DevCheck:
    """`mediqa2019-train`, `medicationqa-dev` or `nfcorpus-dev` (from the data folder), `beir:PATH`, or a JSONL
    file."""
    if spec in ("mediqa2019-train", "mediqa2019", *OUTSIDE_SETS):
        if data_dir is None:
            raise BadInputError(spec, "needs the data folder (--data-dir)")
        if spec in OUTSIDE_SETS:
            return beir_check(Path(data_dir) / OUTSIDE_SETS[spec], spec)
        return mediqa_check(data_dir, spec)
    if spec.startswith("beir:"):
        return beir_check(spec[len("beir:"):])
    return jsonl_check(spec)


@dataclass
class CheckScores:
    """One candidate's per-query metrics on every check."""

    per_query: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def mean(self, check: str, metric: str) -> float:
        v = self.per_query[check][metric]
        return float(v.mean()) if len(v) else 0.0

    def summary(self) -> dict[str, dict[str, float]]:
        return {c: {m: round(float(v.mean()), 2) for m, v in ms.items()} for c, ms in self.per_query.items()}


__all__ = ["CheckPassage", "CheckScores", "DevCheck", "FREE_TEXT", "OUTSIDE_SETS", "REPORTED", "SELF", "SearchedCheck",
           "beir_check", "check_metrics", "outside_sets",
           "dense_scores", "free_text_check", "inverse_cloze_check", "judged_answers_check", "jsonl_check",
           "mediqa_check", "searched_labels_check", "self_labelled_check"]
