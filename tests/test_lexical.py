"""capr's BM25 equals bm25s (Lucene variant) and TF-IDF equals a dense reference, on real passages."""

from __future__ import annotations

import gzip
import itertools
import json

import numpy as np
import pytest

from capr.text.analyzer import Analyzer, AnalyzerConfig
from capr.index.lexical import BM25Params, BM25Scorer, TermMatrix, TfidfScorer

from conftest import need_data


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    path = need_data("medquad_cdv_test", "passages.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line)["text"] for line in itertools.islice(fh, 400)]


QUERIES = [
    "what are the symptoms of facio thoraco genital syndrome",
    "spastic paraplegia inheritance",
    "how many people are affected",
    "treatment of seizures and epilepsy in children",
]


@pytest.mark.parametrize("k1,b", [(1.2, 0.75), (1.5, 0.3)])
def test_bm25_scores_equal_bm25s_lucene(corpus, k1, b):
    import bm25s

    analyzer = Analyzer(AnalyzerConfig())
    tokens = [analyzer(t) for t in corpus]
    ours = BM25Scorer(TermMatrix.from_token_lists(tokens), BM25Params(k1=k1, b=b))
    ref = bm25s.BM25(k1=k1, b=b, method="lucene")
    ref.index(tokens, show_progress=False)
    for q in QUERIES:
        qt = analyzer(q)
        np.testing.assert_allclose(ours.scores(qt), ref.get_scores(qt), rtol=1e-5, atol=1e-5)


def test_tfidf_equals_dense_reference(corpus):
    analyzer = Analyzer(AnalyzerConfig())
    tokens = [analyzer(t) for t in corpus]
    m = TermMatrix.from_token_lists(tokens)
    dense = m.to_csc().toarray().astype(np.float64)
    n = dense.shape[0]
    df = (dense > 0).sum(0)
    idf = np.log((1 + n) / (1 + df)) + 1
    w = np.where(dense > 0, 1 + np.log(np.maximum(dense, 1)), 0) * idf
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    ours = TfidfScorer(m)
    for q in QUERIES:
        qv = np.zeros(dense.shape[1])
        for t, c in zip(*np.unique([m.vocab[t] for t in analyzer(q) if t in m.vocab], return_counts=True)):
            qv[t] = (1 + np.log(c)) * idf[t]
        qv /= np.linalg.norm(qv)
        np.testing.assert_allclose(ours.scores(analyzer(q)), w @ qv, rtol=1e-4, atol=1e-5)


def test_unicode_languages():
    de = Analyzer(AnalyzerConfig(language="german"))
    assert de("Die Müdigkeit und Übelkeit des Patienten") == ["mudig", "ubel", "patient"]
    ru = Analyzer(AnalyzerConfig(language="russian"))
    assert ru("Боли в груди у пациентов") == ["бол", "груд", "пациент"]
    assert ru("Новый йод") == ["нов", "йод"]  # accent folding is for Latin letters: "й" stays "й"
    raw = Analyzer(AnalyzerConfig(language="english", stopwords=False, stem=False))
    assert raw("Naïve IgA-nephropathy, 50mg") == ["naive", "iga", "nephropathy", "50mg"]
    kept = Analyzer(AnalyzerConfig(language="english", stopwords=False, stem=False, fold_accents=False))
    assert kept("Naïve IgA-nephropathy, 50mg") == ["naïve", "iga", "nephropathy", "50mg"]


def test_accented_and_plain_spellings_are_one_term():
    """Users type "meniere", "sjogren", "behcet"; documents write Ménière, Sjögren, Behçet (or the other way round)."""
    analyzer = Analyzer(AnalyzerConfig())
    for accented, plain in [("Ménière's disease", "meniere's disease"), ("Sjögren syndrome", "sjogren syndrome"),
                            ("Behçet", "behcet"), ("Guillain-Barré", "guillain-barre"), ("œdème", "oedeme"),
                            ("STRAßE", "strasse"), ("İnsülin", "insulin")]:
        assert analyzer(accented) == analyzer(plain), accented
        words = [w for w, _, _ in analyzer.words(accented)]
        # the highlighter and the segment writer analyse word by word: the same terms as the whole text
        assert [t for t in analyzer.analyze_words(analyzer.folded_words(accented)) if t] == analyzer(accented)
        assert [t for t in (analyzer.analyze_word(w) for w in words) if t] == analyzer(accented)
    # French stopwords are matched once their accents are folded too
    fr = Analyzer(AnalyzerConfig(language="french"))
    assert fr("a été traité") == fr("a ete traite") and "ete" not in fr("a été traité")


def test_a_word_keeps_its_combining_marks():
    """\\w leaves combining marks out: the vowel signs of Indic scripts cut "खांसी" (cough) into ख, स, which matched
    "बुखार" (fever); decomposed (NFD) text, as macOS and some PDF tools write it, cut "Ménière" into me, nie, re."""
    import unicodedata

    analyzer = Analyzer(AnalyzerConfig(stopwords=False))
    assert analyzer("खांसी") == ["खांसी"] and not set(analyzer("खांसी")) & set(analyzer("बुखार और सिरदर्द"))
    nfd = unicodedata.normalize("NFD", "Ménière disease, Sjögren, йод")
    assert analyzer(nfd) == analyzer("Ménière disease, Sjögren, йод") == analyzer("meniere disease, sjogren, йод")
    # the highlighter's words span the whole decomposed word; word by word, the same terms
    assert [w for w, _, _ in analyzer.words(nfd)][0] == unicodedata.normalize("NFD", "Ménière")
    assert [t for t in analyzer.analyze_words(analyzer.folded_words(nfd)) if t] == analyzer(nfd)
    assert [t for t in (analyzer.analyze_word(w) for w, _, _ in analyzer.words(nfd)) if t] == analyzer(nfd)
    kept = Analyzer(AnalyzerConfig(fold_accents=False, stopwords=False, stem=False))
    assert kept(nfd) == kept("Ménière disease, Sjögren, йод") == ["ménière", "disease", "sjögren", "йод"]
    # an index written before reads its queries as it read its text
    old = Analyzer(AnalyzerConfig.from_dict({k: v for k, v in AnalyzerConfig().to_dict().items() if k != "word_marks"}))
    assert old("खांसी") == ["ख", "स"]


def test_an_index_written_before_accent_folding_keeps_reading_as_it_wrote():
    old_manifest = {"language": "english", "lowercase": True, "stopwords": True, "stem": True, "extra_stopwords": []}
    config = AnalyzerConfig.from_dict(old_manifest)
    assert config.fold_accents is False
    assert Analyzer(config)("Ménière") != Analyzer(config)("meniere")
    assert AnalyzerConfig.from_dict(AnalyzerConfig().to_dict()).fold_accents is True


def test_unknown_language_is_a_clear_error():
    from capr.errors import CaprError

    with pytest.raises(CaprError, match="no stemmer for language 'klingon'"):
        Analyzer(AnalyzerConfig(language="klingon"))


def test_an_index_from_a_newer_capr_is_named_so_not_damaged(tmp_path):
    from capr.errors import CaprError
    from capr.index import IndexWriter, load_index
    from capr.records import Document

    with pytest.raises(CaprError, match="written by a newer capr"):
        AnalyzerConfig.from_dict({**AnalyzerConfig().to_dict(), "fold_ligatures": True})
    with IndexWriter(tmp_path / "idx") as w:
        w.add(Document("d1", "Note", "Ménière's disease."))
    manifest = next((tmp_path / "idx").glob("gen-*/manifest.json"))
    data = json.loads(manifest.read_text())
    data["analyzer"]["fold_ligatures"] = True
    manifest.write_text(json.dumps(data))
    with pytest.raises(CaprError) as e:
        load_index(tmp_path / "idx")
    assert "written by a newer capr" in str(e.value) and "damaged" not in str(e.value) and str(tmp_path) in str(e.value)
