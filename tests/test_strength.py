"""The index probe of issue 53 (capr.search.strength): inverse-cloze questions drawn from the index itself, answered by
BM25, dense and their fusion. On a small synthetic index (no model: a store whose BM25 is capr's own arithmetic and
whose "encoders" are a bag of words and random vectors) the measure must be deterministic, must never let the
answer be found by the sentence taken out of it, and must order a strong and a weak encoder correctly."""

from __future__ import annotations

import hashlib
import zlib

import numpy as np
import pytest

from capr.records import Passage
from capr.search.fusion import FusionMethod
from capr.search.strength import SHARES, cloze_questions, measure_strength, probe_fusion, probe_share
from capr.store.protocol import Capability
from capr.text import bm25

DIM = 4096


def analyzer(text: str) -> list[str]:
    return [w.strip(".,").lower() for w in text.split() if w.strip(".,")]


def concepts(texts: list[str]) -> np.ndarray:
    """A strong encoder: hashed counts of the words' concepts ("t3w1_a" and "t3w1_b" are one), which BM25 cannot
    see (for it they are different words); words every passage has carry no concept."""
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in (w for w in analyzer(t) if "_" in w):
            out[i, zlib.crc32(w.split("_")[0].encode()) % DIM] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def noise(texts: list[str]) -> np.ndarray:
    """A weak encoder: a random unit vector per text (nothing about its words)."""
    out = np.stack([np.random.default_rng(int(hashlib.sha1(t.encode()).hexdigest()[:8], 16)).standard_normal(DIM)
                    for t in texts]).astype(np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


class FakeEncoder:
    def __init__(self, encode) -> None:
        self.encode = encode

    def encode_queries(self, texts):
        return self.encode(list(texts))

    def encode_passages(self, texts):
        return self.encode(list(texts))

    def passage_text(self, passage, index_text):
        return index_text


def corpus(n: int = 80, seed: int = 7) -> list[Passage]:
    """Passages of four sentences each, about their own topic words, each written in one of three forms (and words
    every passage shares)."""
    rng = np.random.default_rng(seed)
    common = ["patients", "often", "report", "symptoms", "doctor", "treatment", "daily", "people", "may", "feel"]
    passages = []
    for i in range(n):
        topic = [f"t{i}w{j}" for j in range(6)]
        sents = []
        for _ in range(4):
            words = [f"{w}_{rng.choice(list('abc'))}" for w in rng.choice(topic, 3, replace=False)]
            words += list(rng.choice(common, 4, replace=False))
            rng.shuffle(words)
            sents.append(" ".join(words).capitalize() + ".")
        text, spans, pos = "", [], 0
        for s in sents:
            spans.append((pos, pos + len(s)))
            text += s + " "
            pos += len(s) + 1
        passages.append(Passage(f"p{i}", f"d{i}", text.rstrip(), None, 0, len(text.rstrip()), spans))
    return passages


class FakeStore:
    """The Store methods the probe uses, over ``passages``: BM25 as capr scores it, dense from the index's encoder."""

    capabilities = frozenset({Capability.bm25, Capability.dense, Capability.exhaustive})
    bm25_params = bm25.BM25Params()

    def __init__(self, passages: list[Passage], encoder: FakeEncoder) -> None:
        self.ps = passages
        self.analyzer = analyzer
        self.enc = encoder
        self.tokens = [analyzer(p.text) for p in passages]
        self.avgdl = float(np.mean([len(t) for t in self.tokens]))
        self.vectors = encoder.encode_passages([p.text for p in passages])

    def row_count(self) -> int:
        return len(self.ps)

    def live_count(self) -> int:
        return len(self.ps)

    def passing(self, flt, keys):
        return np.ones(len(keys), dtype=bool)

    def includes_titles(self) -> bool:
        return False

    def passages(self, keys):
        return [self.ps[int(k)] for k in keys]

    def encoder(self):
        return self.enc

    def term_idf(self, terms):
        df = {t: sum(t in toks for toks in self.tokens) for t in terms}
        return {t: bm25.idf(len(self.ps), d) for t, d in df.items() if d}

    def lexical_top(self, terms, k, flt, method):
        idf = self.term_idf(set(terms))
        scores = np.zeros(len(self.ps), dtype=np.float64)
        for r, toks in enumerate(self.tokens):
            norm = bm25.length_norm(len(toks), self.avgdl, self.bm25_params)
            scores[r] = sum(bm25.term_score(idf[t], toks.count(t), norm) for t in terms if t in idf and t in toks)
        rows = np.flatnonzero(scores > 0)
        order = np.lexsort((rows, -scores[rows]))[:k]
        return rows[order], scores[rows][order]

    def dense_top(self, qvec, k, flt):
        scores = self.vectors @ qvec
        order = np.lexsort((np.arange(len(scores)), -scores))[:k]
        return order.astype(np.int64), scores[order]


@pytest.fixture(scope="module")
def passages():
    return corpus()


def test_a_cloze_question_is_not_in_its_answer_and_the_draw_is_fixed_by_the_seed(passages):
    store = FakeStore(passages, FakeEncoder(concepts))
    questions, avgdl = cloze_questions(store, 30)
    assert len(questions) == 30 and avgdl > 0
    for q in questions:
        assert q.question not in q.answer_text  # the sentence was taken out
        assert q.question in passages[q.row].text
        assert len(q.question.split()) >= 6
    again, _ = cloze_questions(store, 30)
    assert [(q.row, q.question) for q in again] == [(q.row, q.question) for q in questions]
    other, _ = cloze_questions(store, 30, seed=1)
    assert [(q.row, q.question) for q in other] != [(q.row, q.question) for q in questions]


def test_the_measure_is_deterministic_and_orders_a_strong_and_a_weak_encoder(passages):
    strong = measure_strength(FakeStore(passages, FakeEncoder(concepts)), 60)
    weak = measure_strength(FakeStore(passages, FakeEncoder(noise)), 60)
    assert strong is not None and weak is not None
    assert strong == measure_strength(FakeStore(passages, FakeEncoder(concepts)), 60)
    assert set(strong.by_share) == set(SHARES)
    assert strong.bm25 == pytest.approx(weak.bm25)  # the same BM25 on the same questions
    assert strong.dense > 0.5 > 0.1 > weak.dense  # concepts find the answers, noise does not
    # the fusion follows: noise gets BM25 alone, the strong encoder most of the share
    assert probe_share(weak) == 1.0 and probe_share(strong) <= 0.2
    fused = probe_fusion(weak)
    assert fused.method is FusionMethod.rrf and fused.weights == (probe_share(weak), 1.0 - probe_share(weak))
    # a tolerance leans to dense among shares the probe cannot tell apart, never away from it
    assert probe_share(strong, 0.1) <= probe_share(strong)


def test_no_measure_without_vectors_or_enough_questions(passages):
    store = FakeStore(passages, FakeEncoder(concepts))
    store.capabilities = frozenset({Capability.bm25, Capability.exhaustive})
    assert measure_strength(store) is None
    assert probe_fusion(None) is None
    tiny = FakeStore(passages[:5], FakeEncoder(concepts))
    assert measure_strength(tiny) is None  # five passages give five questions: too few to say anything


def test_the_probe_s_fusion_is_used_only_where_asked_and_the_fusion_is_left_to_the_store(passages, monkeypatch):
    from capr.search import strength
    from capr.search.config import SearchOptions, SearchProfile
    from capr.search.fusion import FusionConfig
    from capr.search.query import parse_query

    store = FakeStore(passages, FakeEncoder(noise))
    store.name, store.generation_info, store.dense_manifest = "fake", lambda: {"generation": 1}, lambda: {"model": "noise"}
    calls = []
    measured = strength.measure_strength
    monkeypatch.setattr(strength, "measure_strength", lambda s: calls.append(s) or measured(s))
    probed = strength.probed_fusion(store)
    assert probed is not None and probed.weights == (1.0, 0.0)  # noise: BM25 alone
    assert strength.probed_fusion(store) is probed and len(calls) == 1  # once per generation

    profile = SearchProfile.from_manifest({}, dense=True, lexical=True)
    pq = parse_query("how is t3w1_a treated", analyzer)

    def fusion(**given):
        options = SearchOptions(**given)
        return profile.question_options(store, options, profile.resolve(options), pq).fusion

    assert fusion(fusion_probe=True) == probed
    assert fusion() != probed  # off by default
    explicit = FusionConfig(weights=(0.5, 0.5))
    assert fusion(fusion_probe=True, fusion=explicit) == explicit  # the caller's own fusion wins
    adapted = SearchProfile.from_manifest({"fusion": {"method": "rrf", "weights": [0.3, 0.7]}})
    options = SearchOptions(fusion_probe=True)
    assert adapted.question_options(store, options, adapted.resolve(options), pq).fusion.weights == (0.3, 0.7)


def test_the_service_and_the_cli_pass_the_switch():
    from typer.testing import CliRunner

    from capr.cli import app
    from capr.service import schemas as S
    from capr.service.config import ServiceConfig
    from capr.service.routers.search import search_options

    assert search_options(S.SearchRequest(text="gout", fusion_probe=True), ServiceConfig()).fusion_probe is True
    assert search_options(S.SearchRequest(text="gout"), ServiceConfig()).fusion_probe is False
    assert "--fusion-probe" in CliRunner().invoke(app, ["search", "--help"], terminal_width=200).output


def test_text_without_sentence_ends_is_asked_in_windows_of_words():
    """NFCorpus' text is lower-cased and stop-word-free, without a full stop: its passages are cut into windows."""
    rng = np.random.default_rng(3)
    passages = []
    for i in range(30):
        text = " ".join(f"t{i}w{j}" if rng.random() < 0.3 else f"c{j}" for j in rng.integers(0, 40, 65))
        passages.append(Passage(f"p{i}", f"d{i}", text, None, 0, len(text), [(0, len(text))]))
    questions, _ = cloze_questions(FakeStore(passages, FakeEncoder(concepts)), 25)
    assert len(questions) == 25
    assert {len(q.question.split()) for q in questions} <= {20, 25}  # a short last window joins the one before
    assert all(len(q.answer_text.split()) == 65 - len(q.question.split()) for q in questions)


def test_the_answer_s_bm25_is_the_index_s_arithmetic(passages):
    """The masked answer is scored as the index would score that text: on the whole passage, with the index's mean
    length, the probe's BM25 equals the index's own score."""
    from capr.search.query import parse_query
    from capr.search.strength import _bm25_of_text
    from capr.records import Query

    store = FakeStore(passages, FakeEncoder(concepts))
    questions, avgdl = cloze_questions(store, 20)
    assert avgdl == pytest.approx(store.avgdl, rel=0.1)
    for q in questions:
        pq = parse_query(Query("q", text=q.question), analyzer, expand=False)
        rows, scores = store.lexical_top(pq.terms, len(passages), None, None)
        own = float(scores[list(rows).index(q.row)])
        assert _bm25_of_text(store, pq, passages[q.row].text, store.avgdl) == pytest.approx(own, rel=1e-6)
        assert _bm25_of_text(store, pq, q.answer_text, store.avgdl) < own  # the sentence's own words are gone


def test_an_index_of_one_line_passages_is_not_read_whole():
    from capr.search.strength import READ_PER_QUESTION

    lines = [Passage(f"p{i}", f"d{i}", f"Line {i} of a note, said once.", None, 0, 30, [(0, 30)]) for i in range(400)]
    store = FakeStore(lines, FakeEncoder(concepts))
    read = []
    store.passages = lambda keys: read.extend(keys) or [lines[int(k)] for k in keys]
    questions, _ = cloze_questions(store, 2)
    assert questions == [] and len(read) == 2 * READ_PER_QUESTION
