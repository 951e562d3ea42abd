"""Indexing shortcuts must not change what an index holds: sentences computed when a passage is read equal those the
segmenter computes (also for sections short enough to skip sentence splitting), the term counts of the
one-analysis-per-word path, counted for a whole segment at once, equal those of analysing every token passage by
passage, and texts stored once and compressed read back exactly."""

from __future__ import annotations

import array
from collections import Counter
from itertools import islice

import numpy as np
import pytest

from capr.corpus import ReadReport, read_documents
from capr.corpus.segment import SegmenterConfig, segment
from capr.text.sentences import passage_sentences
from capr.index import AnalyzerConfig, Index, IndexWriter
from capr.text.analyzer import Analyzer
from capr.index.builder import SegmentBuilder
from capr.index.lexical import TermMatrix
from capr.index.segment import passage_index_text
from capr.records import Document, Passage, Section
from conftest import need_data

CONFIGS = [SegmenterConfig(max_tokens=0), SegmenterConfig(max_tokens=0, include_title=False), SegmenterConfig(),
           SegmenterConfig(max_tokens=40, overlap=10)]

ODD = [
    Document(doc_id="odd1", title="Odd", text="  \n\n  Dr. Smith saw pts. e.g. 2 mg q.d.\nNext line. And more!\n\n\n  ",
             sections=[Section(heading="", aspect="", start=0, end=60)]),
    Document(doc_id="odd2", title="", text="Über Straße İstanbul naïve café. ΣΊΣΥΦΟΣ Καλημέρα.\r\n\u2028 Ok? Yes.\n"),
    Document(doc_id="odd3", title="T", text="...\n\n?!\n\nHISTORY: [**Name (NI) 123**] was seen. Then left.\n"),
    Document(doc_id="odd4", title="", text="   \n \n", sections=[Section(heading="x", aspect="", start=0, end=7)]),
]


def _docs(demo_dir, n_mtsamples: int = 300) -> list[Document]:
    docs = list(read_documents(demo_dir, report=ReadReport(skip_bad=True)))
    path = need_data("mtsamples", "mtsamples.csv.gz")
    docs += list(islice(read_documents(path, report=ReadReport(skip_bad=True)), n_mtsamples))
    return docs + ODD


@pytest.fixture(scope="module")
def docs(demo_dir) -> list[Document]:
    return _docs(demo_dir)


@pytest.mark.parametrize("config", CONFIGS + [SegmenterConfig(max_tokens=12)],
                         ids=lambda c: f"max{c.max_tokens}-ov{c.overlap}-t{int(c.include_title)}")
def test_lazy_sentences_equal_eager(docs, config):
    n_lazy = 0
    for doc in docs:
        eager = segment(Document.from_dict(doc.to_dict()), config)
        lazy = segment(Document.from_dict(doc.to_dict()), config, lazy_sentences=True)
        assert len(lazy) == len(eager)
        for e, p in zip(eager, lazy):
            stored = p.to_dict(keep_lazy=True)
            if stored["sentences"] is None:  # not computed yet
                n_lazy += 1
                assert passage_sentences(p.text, p.start) == e.sentences
                # what an index stores and reads back, computed on first access
                back = Passage.from_dict(stored)
                assert back.sentences == e.sentences and back.sentence_texts() == e.sentence_texts()
                assert back.to_dict() == e.to_dict()
            assert p == e  # the lazy passage's own sentences, computed on access
    assert n_lazy > 0  # whole sections: never split (max_tokens 0), or short enough to need no sentence split


@pytest.mark.parametrize("config", CONFIGS[1:3], ids=["max0", "max200"])
def test_index_reads_back_eager_sentences(tmp_path, docs, config):
    with IndexWriter(tmp_path / "idx", segmenter=config, analyzer=AnalyzerConfig()) as w:
        for d in docs:
            w.add(d)
    idx = Index.load(tmp_path / "idx")
    try:
        expected = {p.pid: p for d in docs for p in segment(Document.from_dict(d.to_dict()), config)}
        assert len(idx) == len(expected)
        for row in range(len(idx)):
            p = idx.passage(row)
            e = expected[p.pid]
            assert p.sentences == e.sentences and p.sentence_texts() == e.sentence_texts()
            assert (p.text, p.start, p.end, p.aspect, p.heading, p.title) == (e.text, e.start, e.end, e.aspect, e.heading, e.title)
    finally:
        idx.close()


def _reference_rows(analyzer: Analyzer, texts: list[str]):
    """The term rows as SegmentBuilder built them before: analyse every token, Counter of the terms."""
    vocab: dict[str, int] = {}
    cols, tfs, nnz, lens = array.array("i"), array.array("f"), array.array("i"), array.array("f")
    for text in texts:
        tokens = analyzer(text)
        counts = Counter(tokens)
        cols.extend([vocab.setdefault(t, len(vocab)) for t in counts])
        tfs.extend(counts.values())
        nnz.append(len(counts))
        lens.append(len(tokens))
    return vocab, cols, tfs, nnz, lens


@pytest.mark.parametrize("aconf", [AnalyzerConfig(), AnalyzerConfig(lowercase=False), AnalyzerConfig(stopwords=False),
                                   AnalyzerConfig(stem=False, extra_stopwords=["Patient", "HISTORY"])],
                         ids=["default", "no-lowercase", "no-stopwords", "no-stem-extra-stop"])
def test_term_rows_equal_token_by_token(tmp_path, docs, aconf):
    analyzer = Analyzer(aconf)
    config = SegmenterConfig()
    b = SegmentBuilder(tmp_path, config, analyzer)
    try:
        texts = []
        for d in docs:
            passages = segment(Document.from_dict(d.to_dict()), config, lazy_sentences=True)
            b.add(d, passages)
            texts += [passage_index_text(p, config.include_title) for p in passages]
        vocab, cols, tfs, nnz, lens = _reference_rows(Analyzer(aconf), texts)
        expected = TermMatrix.from_rows(np.frombuffer(cols, dtype=np.int32), np.frombuffer(tfs, dtype=np.float32),
                                        np.frombuffer(nnz, dtype=np.int32), np.frombuffer(lens, dtype=np.float32), vocab)
        got = b.sink.counter.matrix()
        assert b.sink.counter.vocab == vocab and list(b.sink.counter.vocab) == list(vocab)
        for name in ("indptr", "indices", "tf", "doc_len"):
            assert np.array_equal(getattr(got, name), getattr(expected, name)), name
            assert getattr(got, name).dtype == getattr(expected, name).dtype, name
    finally:
        b.abort()


@pytest.mark.parametrize("value", ["a", "a/b", "x y", "é/ü", "a\u200bb", "a\u2028b", "tab\tin", "nul\x00", "\ud800x", "/etc",
                                   "a//b", "./a", "a/..", ".", "..", "...", "a.b", " a", "a ", "", "x" * 257, 7, True, 1.5])
def test_check_doc_id_fast_paths_agree(value):
    """check_doc_id's fast paths give the answer of its full checks."""
    import unicodedata

    from capr.records import DOC_ID_MAX_LENGTH, check_doc_id

    def reference(v):
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            return False
        s = str(v)
        return bool(s) and len(s) <= DOC_ID_MAX_LENGTH and s == s.strip() \
            and not any(unicodedata.category(c) in ("Cc", "Cs") for c in s) \
            and not (s.startswith("/") or any(p in ("", ".", "..") for p in s.split("/")))

    try:
        check_doc_id(value)
        ok = True
    except ValueError:
        ok = False
    assert ok == reference(value)


def test_column_build_codes():
    from capr.index.store import Column

    raw = ["Asthma", "asthma ", None, 1, True, "1", 1.0, "", "", "Gout", None, "ASTHMA", "true", False, 0]
    col = Column.build(raw)
    expected_values, index, codes = [], {}, []
    for v in raw:  # the definition: one code per key (case and surrounding blanks ignored), first value kept
        k = Column._key(v) if v is not None else "\x00missing"
        if k not in index:
            index[k] = len(expected_values)
            expected_values.append(v)
        codes.append(index[k])
    assert col.values == expected_values and col.codes.tolist() == codes and col.codes.dtype.name == "int32"
    assert Column.build([]).codes.shape == (0,)


@pytest.mark.parametrize("aconf", [AnalyzerConfig(), AnalyzerConfig(lowercase=False), AnalyzerConfig(stopwords=False)],
                         ids=["default", "no-lowercase", "no-stopwords"])
def test_sentence_tokens_equal_analysing_each_sentence(docs, aconf):
    """Sentence evidence reads each sentence's tokens off the passage's analysed words (shared with highlighting);
    they equal analysing each sentence's text, also where a sentence edge cuts a word."""
    from capr.search.evidence import _sentence_tokens, passage_sentences as sentence_triples

    analyzer = Analyzer(aconf)
    cut = Passage(pid="c", doc_id="c", text="Alpha betagamma delta. Épsilon zeta", aspect=None, start=100, end=135,
                  sentences=[(100, 110), (110, 122), (123, 135)])  # "betagamma" split across two sentences
    passages = [p for d in docs for c in CONFIGS[::2] for p in segment(d, c)] + [cut]
    checked = 0
    for p in passages:
        sents = sentence_triples(p)
        assert _sentence_tokens(p, sents, analyzer) == [analyzer(t) for _, _, t in sents], p.pid
        checked += len(sents)
    assert checked > 5000
    cut_tokens = _sentence_tokens(cut, sentence_triples(cut), analyzer)
    assert cut_tokens[0][-1] != cut_tokens[1][0]  # the cut word is analysed in its two pieces, as before


def test_texts_across_compressed_blocks_read_back_exactly(tmp_path):
    """Each document's text is stored once, compressed in blocks: a document spanning many blocks (quotes,
    backslashes, control characters, non-ASCII, astral) and every passage cut from it read back exactly, as do the
    documents around it."""
    from capr.index.blocks import BLOCK_BYTES

    text = ('He said "stop"\\now \\\\ tab\t bell\x07 é ß 汉字 🫀 done.\n\nPLAN: rest. ' * 4000)
    assert len(text.encode()) > 3 * BLOCK_BYTES
    docs = [Document(doc_id="short", title="", text="PLAN: aspirin."),
            Document(doc_id="long", title="T \"q\"", text=text, metadata={"k": "v\x00capr:text\x00"}),
            Document(doc_id="long2", title="", text=text[::-1]), Document(doc_id="short2", title="x", text="Über.")]
    with IndexWriter(tmp_path / "idx", segmenter=SegmenterConfig(max_tokens=30)) as w:
        for d in docs:
            w.add(Document.from_dict(d.to_dict()))
    index = Index.load(tmp_path / "idx")
    try:
        for d in docs:
            back = index.document(d.doc_id)
            assert (back.text, back.title, back.metadata) == (d.text, d.title, d.metadata)
        expected = [p for d in docs for p in segment(Document.from_dict(d.to_dict()), SegmenterConfig(max_tokens=30))]
        assert len(index) == len(expected) > 1000
        for row, e in enumerate(expected):
            p = index.passage(row)
            assert (p.pid, p.text, p.start, p.end, p.sentences, p.title) == (e.pid, e.text, e.start, e.end, e.sentences,
                                                                             e.title)
    finally:
        index.close()


def test_the_analysis_process_writes_the_same_files(tmp_path, docs):
    """`capr index` on more than one core analyses passages in a child process: the segment files are those of
    analysing them in the writer's own process, byte for byte (cut into several segments, so the child counts more
    than one)."""
    def build(root, analysis_process):
        with IndexWriter(root, analysis_process=analysis_process, segment_passages=700) as w:
            for d in docs:
                w.add(Document.from_dict(d.to_dict()))
        return {p.relative_to(root): p.read_bytes() for p in sorted((root / "segments").rglob("*")) if p.is_file()}

    here, child = build(tmp_path / "here", False), build(tmp_path / "child", True)
    assert len({p.parts[1] for p in here}) >= 3
    assert here.keys() == child.keys() and all(here[k] == child[k] for k in here)
