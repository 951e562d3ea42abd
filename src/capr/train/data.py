"""Training batches from self-supervised labels: sampled ⟨entity, aspect⟩ queries, multi-positive masks,
BM25 hard negatives, SPBERTQA sentence selection and optional document context."""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from capr.text.aspects import ASPECT_SYNONYMS
from capr.errors import BadInputError
from capr.text.analyzer import Analyzer, AnalyzerConfig
from capr.labels.gazetteer import normalize_name
from capr.labels.generate import LabeledPassage
from capr.labels.questions import is_question_pair
from capr.models.context import PassageContext, contextual_text, parse_context
from capr.models.selection import SentenceSelector
from capr.train.args import TrainArgs

QUESTION_TEMPLATES = (
    "What are the {aspect} of {entity}?",
    "What is the {aspect} of {entity}?",
    "{entity}: {aspect}?",
    "Tell me about the {aspect} of {entity}.",
)


@dataclass
class TrainQuery:
    text: str
    entity: str
    aspect: str
    passage: int  # index of the passage the query was sampled from
    removed: str | None = None  # inverse cloze: the passage's sentence that is the query, cut from the passage


@dataclass
class Batch:
    queries: list[TrainQuery]
    passages: list[str]  # model inputs; the first len(queries) are the positives, in order
    positives: np.ndarray  # bool [n_queries, n_passages]: passage j answers query i too
    passage_ids: list[int]
    hard_columns: list[list[int]]  # per query, the columns of its BM25 hard negatives


def _is_dev(doc_id: str, fraction: float, seed: int) -> bool:
    h = int.from_bytes(hashlib.sha1(f"dev-{seed}:{doc_id}".encode()).digest()[:8], "big")
    return h / 2**64 < fraction


def passage_input(lp: LabeledPassage, context: "PassageContext | str | bool") -> str:
    """The passage as the model reads it; with context, the document title (and heading) come first."""
    return contextual_text(lp.text, lp.title, lp.heading, parse_context(context))


class TrainingSet:
    """Labeled passages split into train and dev by document, with lookups for multi-positive masks."""

    def __init__(self, labels: Iterable[LabeledPassage], args: TrainArgs) -> None:
        self.args = args
        all_labels = list(labels)
        if not all_labels:
            raise BadInputError("labels", "no labeled passages to train on")
        dev = [lp for lp in all_labels if _is_dev(lp.doc_id, args.dev_fraction, args.seed)]
        train = [lp for lp in all_labels if not _is_dev(lp.doc_id, args.dev_fraction, args.seed)]
        if not train:
            train, dev = all_labels, []
        self.train, self.dev = train, dev
        self.entity_sets = [{normalize_name(e) for e in lp.entities} for lp in train]
        self.analyzer = Analyzer(AnalyzerConfig())
        df: Counter = Counter()
        for lp in train:
            df.update(set(self.analyzer(lp.text)))
        self.selector = SentenceSelector(self.analyzer, df, len(train))
        self._bm25 = None
        # (query text, n, exclude, answers(j) -> bool) -> passages: a dense miner replacing BM25 (a residual
        # cross-encoder's bi-encoder); None: BM25
        self.dense_negatives = None
        self._context_rng = random.Random(args.seed + 1)

    def __len__(self) -> int:
        return len(self.train)

    def answers(self, j: int, entity: str, aspect: str) -> bool:
        return self.train[j].aspect == aspect and normalize_name(entity) in self.entity_sets[j]

    # -- queries
    def inverse_cloze_query(self, j: int, rng: random.Random) -> TrainQuery | None:
        """A sentence of passage j as the query (None when the passage has too few usable sentences)."""
        lp = self.train[j]
        spans = [(s, e) for s, e in lp.sentences if 6 <= len(lp.text[s:e].split()) <= 40]
        if len(lp.sentences) < 3 or not spans:
            return None
        s, e = rng.choice(spans)
        sentence = lp.text[s:e].strip()
        return TrainQuery(text=sentence, entity="", aspect="", passage=j, removed=sentence)

    def sample_query(self, j: int, rng: random.Random, lp: LabeledPassage | None = None) -> TrainQuery:
        a = self.args
        if is_question_pair(lp or self.train[j]):  # its own question; no other passage counts as its answer
            return TrainQuery(text=rng.choice((lp or self.train[j]).questions), entity="", aspect="", passage=j)
        if lp is None and a.ict_prob and rng.random() < a.ict_prob:
            q = self.inverse_cloze_query(j, rng)
            if q is not None:
                return q
        lp = lp or self.train[j]
        ents = lp.entities
        entity = ents[0] if len(ents) == 1 or rng.random() < a.title_prob else rng.choice(ents[1:])
        aspect_label = lp.aspect
        surface = aspect_label
        syns = [s for s in ASPECT_SYNONYMS.get(aspect_label, []) if len(s) > 3]
        if syns and rng.random() < a.synonym_prob:
            surface = rng.choice(syns)
        if rng.random() < a.question_prob:
            if lp.questions and entity == ents[0] and rng.random() < 0.5:
                text = rng.choice(lp.questions)
            else:
                text = rng.choice(QUESTION_TEMPLATES).format(entity=entity, aspect=surface)
        elif rng.random() < 0.15:
            text = f"{surface} of {entity}"
        else:
            text = f"{entity} {surface}"
        return TrainQuery(text=text, entity=entity, aspect=aspect_label, passage=j)

    # -- passages
    def passage_text(self, j: int, query: str | None = None, lp: LabeledPassage | None = None) -> str:
        lp = lp or self.train[j]
        text = lp.text
        if self.args.sentence_selection and query is not None:
            budget = int(self.args.max_length * 0.7)  # ~1.4 word pieces per word in clinical text
            text = self.selector.select(query, text, lp.sentences, budget)
            if text is not lp.text:
                lp = LabeledPassage(lp.pid, lp.doc_id, text, lp.aspect, lp.entities, lp.title, lp.heading)
        if self.args.context_dropout and self._context_rng.random() < self.args.context_dropout:
            return lp.text
        return passage_input(lp, self.args.context)

    def bm25(self):
        if self._bm25 is None:
            import bm25s

            retriever = bm25s.BM25()
            retriever.index([self.analyzer(lp.text) for lp in self.train], show_progress=False)
            self._bm25 = retriever
        return self._bm25

    def hard_negatives(self, q: TrainQuery, n: int, exclude: set[int], rng: random.Random, depth: int = 30) -> list[int]:
        if q.removed is not None:  # inverse cloze: the other passages of the batch are the negatives
            return []
        if self.dense_negatives is not None:
            return self.dense_negatives(q.text, n, exclude, lambda j: self.answers(j, q.entity, q.aspect)) if n > 0 else []
        toks = self.analyzer(f"{q.entity} {q.aspect}")
        if not toks or n <= 0:
            return []
        import bm25s  # noqa: F401

        docs, _ = self.bm25().retrieve([toks], k=min(depth, len(self.train)), show_progress=False, n_threads=1)
        pool = [int(d) for d in docs[0] if int(d) not in exclude and not self.answers(int(d), q.entity, q.aspect)]
        return pool[:n] if pool else []

    def batches(self, rng: random.Random, with_selection_query: bool) -> Iterable[Batch]:
        order: list[int] = []
        while True:
            if len(order) < self.args.batch_size:
                fresh = list(range(len(self.train)))
                rng.shuffle(fresh)
                if self.args.group_batches:
                    # a document's passages side by side: each is the others' in-batch negative (same entity,
                    # another aspect), which random batches almost never hold
                    rank = {d: rng.random() for d in {lp.doc_id for lp in self.train}}
                    fresh.sort(key=lambda j: rank[self.train[j].doc_id])
                order += fresh
            picked, order = order[: self.args.batch_size], order[self.args.batch_size :]
            picked = list(dict.fromkeys(picked))
            queries = [self.sample_query(j, rng) for j in picked]
            ids = list(picked)
            hard_cols: list[list[int]] = []
            for q in queries:
                cols = []
                for neg in self.hard_negatives(q, self.args.hard_negatives, set(ids), rng):
                    cols.append(len(ids))
                    ids.append(neg)
                hard_cols.append(cols)
            texts = []
            for k, j in enumerate(ids):
                sel_query = queries[k].text if (with_selection_query and k < len(queries)) else None
                text = self.passage_text(j, sel_query)
                if k < len(queries) and queries[k].removed:
                    # as in ICT, the sentence stays in its passage one time in ten (lexical overlap still counts)
                    text = text.replace(queries[k].removed, "", 1) if rng.random() < 0.9 else text
                texts.append(text)
            pos = np.zeros((len(queries), len(ids)), dtype=bool)
            for i, q in enumerate(queries):
                for k, j in enumerate(ids):
                    pos[i, k] = k == i or (q.removed is None and self.answers(j, q.entity, q.aspect))
            yield Batch(queries, texts, pos, ids, hard_cols)

    # -- dev
    def dev_set(self, n_queries: int, n_candidates: int = 32, pool_size: int = 512, seed: int = 0) -> "DevSet":
        """Tuple queries over held-out documents, each with its gold passage among random dev candidates."""
        rng = random.Random(seed)
        idx = list(range(len(self.dev)))
        rng.shuffle(idx)
        pool = [self.dev[k] for k in idx[:pool_size]]
        if len(pool) < 2:
            return DevSet([], [], [], [], [])
        sets = [{normalize_name(e) for e in lp.entities} for lp in pool]
        # Candidates as in the benchmarks: the pool's BM25 best for the query (hard, often the same entity),
        # topped up at random; random candidates alone make the dev set too easy to steer training.
        import bm25s

        bm25 = bm25s.BM25()
        bm25.index([self.analyzer(lp.text) for lp in pool], show_progress=False)
        queries, cands, rel = [], [], []
        for j in range(min(n_queries, len(pool))):
            lp = pool[j]
            pair = is_question_pair(lp)
            entity = "" if pair else lp.entities[0]
            query = lp.questions[0] if pair else f"{entity} {lp.aspect}"
            toks = self.analyzer(query) or ["_"]
            hits, _ = bm25.retrieve([toks], k=min(len(pool), n_candidates), show_progress=False, n_threads=1)
            group = [j] + [int(k) for k in hits[0] if int(k) != j][: n_candidates // 2]
            rest = [k for k in range(len(pool)) if k not in set(group)]
            group += rng.sample(rest, min(len(rest), n_candidates - len(group)))
            rng.shuffle(group)
            queries.append(query)
            cands.append(group)
            rel.append([pool[k].text == lp.text if pair else
                        pool[k].aspect == lp.aspect and normalize_name(entity) in sets[k] for k in group])
        texts = [passage_input(lp, self.args.context) for lp in pool]
        return DevSet(queries, texts, cands, rel, pool)


@dataclass
class DevSet:
    queries: list[str]
    passages: list[str]  # the pool, encoded once per evaluation by bi/poly models
    candidates: list[list[int]]  # pool indices per query
    relevant: list[list[bool]]
    labeled: list[LabeledPassage]

    def __bool__(self) -> bool:
        return bool(self.queries)
