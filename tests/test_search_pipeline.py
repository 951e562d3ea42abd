"""One search pipeline: `capr search`, `POST /search` and the Python API go through the same Searcher, so
they rank the same passages with the same scores, highlights and evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from capr.cli import app
from capr.errors import QueryError
from capr.search.query import parse_query
from capr.records import Query
from capr.search import Evidence, SearchOptions, Searcher
from capr.service.app import create_app
from capr.service.config import ServiceConfig
from service_support import build_demo_index

# (text, entity, aspect, filters): structured and free text, with and without filters
QUERIES = [
    (None, "IgA nephropathy", "symptoms", {}),
    (None, "cardiomyopathy", "family history", {}),
    (None, "asthma", "treatment", {}),
    (None, "type 2 diabetes", "medications", {}),
    (None, "gout", "diagnosis", {}),
    (None, "atrial fibrillation", "medications", {"aspect": "medications"}),
    (None, "pneumonia", "symptoms", {}),
    (None, "celiac disease", "causes", {}),
    (None, "migraine", None, {}),
    (None, None, "allergies", {}),
    (None, "heart failure", "plan", {}),
    (None, "hypothyroidism", "symptoms", {"aspect": "symptoms"}),
    ("how is atrial fibrillation treated", None, None, {}),
    ("what causes gout", None, None, {}),
    ("blood thinner for an irregular heartbeat", None, None, {}),
    ("shortness of breath and wheezing", None, None, {}),
    ("inhaled corticosteroids", None, None, {"aspect": "treatment"}),
    ("insulin dose adjustment", None, None, {}),
    ("family history of sudden cardiac death", None, None, {}),
    ("kidney biopsy showed IgA deposits", None, None, {}),
    ("mg daily", None, None, {"aspect": "medications"}),
    ("levothyroxine", None, None, {}),
    ("gluten free diet", None, None, {}),
    ("chest x-ray infiltrate", None, None, {}),
    ("stroke risk score", None, None, {}),
    ("joint pain and swelling", None, None, {}),
    ("what are the symptoms of COPD", None, None, {}),
    ("allergic to penicillin", None, None, {}),
    ("hemoglobin A1c", "type 2 diabetes", None, {}),
    ("steroids", "IgA nephropathy", "treatment", {}),
]


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory, demo_dir) -> Path:
    return build_demo_index(demo_dir, tmp_path_factory.mktemp("pipeline") / "idx")


def _cli(runner, index: Path, text, entity, aspect, filters, k: int = 5) -> list[dict]:
    args = ["search", str(index), "-k", str(k), "--json", "--evidence", "lexical"]
    if text:
        args.insert(2, text)
    if entity:
        args += ["--entity", entity]
    if aspect:
        args += ["--aspect", aspect]
    for f, v in filters.items():
        args += ["--filter", f"{f}={v}"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["results"]


def _key(results: list[dict]) -> list[tuple]:
    return [(r["rank"], r["pid"], r["score"], [tuple(h) for h in r["highlights"]],
             [(s["start"], s["end"], s["score"], s["evidence"]) for s in r["sentences"]]) for r in results]


def test_cli_and_service_return_the_same_ranking_and_evidence(runner, demo_index):
    client = TestClient(create_app(demo_index, ServiceConfig(watch_index=False)))
    compared = 0
    for text, entity, aspect, filters in QUERIES:
        body = {k: v for k, v in {"text": text, "entity": entity, "aspect": aspect}.items() if v}
        api = client.post("/search", json={**body, "k": 5, "filters": filters, "evidence": True})
        assert api.status_code == 200, api.text
        cli = _cli(runner, demo_index, text, entity, aspect, filters)
        assert cli, (text, entity, aspect)
        assert _key(cli) == _key(api.json()["results"]), (text, entity, aspect, filters)
        assert any(s["evidence"] for r in cli for s in r["sentences"])
        compared += 1
    assert compared == len(QUERIES) >= 30


def test_the_query_is_parsed_once_and_every_stage_reads_it(demo_index):
    """The aspect's synonyms are alternatives (disjunction-max), the dense text follows the template, and a
    ParsedQuery handed to the Searcher is used as it is (no re-parsing)."""
    from capr.index import load_index

    index = load_index(demo_index)
    pq = parse_query(Query("q", entity="cardiomyopathy", aspect="family history"), index.analyzer)
    base, phrases = pq.dismax
    assert base == ["cardiomyopathi"] and ["fh"] in phrases and pq.aspect == "family history"
    assert pq.dense_text("of") == "family history of cardiomyopathy"
    searcher = Searcher(index)
    a = searcher.search(pq, SearchOptions(k=3))
    b = searcher.search(Query("q", entity="cardiomyopathy", aspect="family history"), SearchOptions(k=3))
    assert [(h.pid, h.score) for h in a.hits] == [(h.pid, h.score) for h in b.hits]
    assert a.hits[0].passage.aspect == "family history"
    # evidence and highlights come from the same parsed terms
    ev = searcher.search(pq, SearchOptions(k=1, evidence=Evidence.lexical)).hits[0]
    assert ev.sentences and any(s.evidence for s in ev.sentences)
    assert all(ev.passage.start <= a0 < b0 <= ev.passage.end for a0, b0 in ev.highlights)


def test_every_caller_maps_its_input_onto_options_through_one_resolve_step():
    """SearchOptions.from_mapping reads the CLI's, the service's and eval's shorthand once: a fusion method, evidence
    as true/false, empty filters, and the fusion an adapted index records."""
    from dataclasses import replace

    from capr.records import Retriever
    from capr.search import SearchProfile
    from capr.search.config import DEFAULT_FUSION, Origin
    from capr.search.fusion import FusionMethod

    given = SearchOptions.from_mapping
    assert given({"fusion": "rrf", "k": None, "filters": [], "evidence": None}) == SearchOptions()
    weighted = given({"fusion": FusionMethod.weighted}).fusion
    assert (weighted.method, weighted.weights, weighted.rrf_k, weighted.depth) == \
        (FusionMethod.weighted, (0.5, 0.5), DEFAULT_FUSION.rrf_k, DEFAULT_FUSION.depth)
    assert given({"evidence": True}).evidence is Evidence.lexical  # the cheap scores unless a dense retriever is asked
    assert given({"evidence": True, "retriever": Retriever.hybrid}).evidence is Evidence.dense
    assert given({"evidence": False, "retriever": Retriever.dense}).evidence is Evidence.none
    assert given({"evidence": "lexical"}).evidence is Evidence.lexical
    with pytest.raises(QueryError, match="unknown search option 'topk'"):
        given({"topk": 5})
    adapted = SearchProfile.from_manifest({"fusion": {"method": "rrf", "weights": [0.1, 0.9]}})
    assert adapted.origins["fusion"] is Origin.adapted
    assert given({}, recorded=adapted).fusion.weights == (0.1, 0.9)
    assert given({"fusion": "weighted"}, recorded=adapted).fusion.method is FusionMethod.weighted  # asked wins
    assert given({}, recorded=replace(adapted, origins={"fusion": Origin.default})).fusion is None


HEALTH_ASPECTS = {a: 50 for a in ["information", "symptoms", "causes", "treatment", "exams and tests", "outlook",
                                  "inheritance", "frequency", "genetic changes", "research", "considerations"]}


def test_an_aspect_the_corpus_lacks_reads_as_its_nearest_corpus_aspect():
    from capr.text.analyzer import Analyzer, AnalyzerConfig
    from capr.text.aspects import nearest_aspect

    an = Analyzer(AnalyzerConfig())
    assert nearest_aspect("treatment", HEALTH_ASPECTS, an) == "treatment"  # the corpus has it: itself
    assert nearest_aspect("Prognosis", HEALTH_ASPECTS, an) == "outlook"  # a synonym: its canonical aspect
    assert nearest_aspect("genetic inheritance", HEALTH_ASPECTS, an) == "inheritance"
    assert nearest_aspect("research directions and trials", HEALTH_ASPECTS, an) == "research"
    assert nearest_aspect("diagnosis", HEALTH_ASPECTS, an) == "exams and tests"  # a note section on health articles
    assert nearest_aspect("family history", HEALTH_ASPECTS, an) is None  # nothing close: no prior
    # "management" is a treatment synonym and "considerations" an aspect of its own: a tie means no guess
    assert nearest_aspect("management considerations", HEALTH_ASPECTS, an) is None
    # rare one-off headings are never the target
    assert nearest_aspect("genetic inheritance", {"inheritance": 1, "information": 5000}, an) is None


def test_search_favours_the_nearest_corpus_aspect_and_says_so(demo_index):
    """A user's own aspect wording that is no section of the index is read as the section it means, with a notice
    (before: `unknown aspect` for users, and no aspect prior at all for benchmark queries)."""
    from capr.index import Index
    from capr.search import Searcher

    searcher = Searcher(Index.load(demo_index))
    q = Query("q", entity="gout", aspect="treatment options and management")
    res = searcher.search(q, SearchOptions(k=3))
    assert any("'treatment'" in n for n in res.notices)
    assert res.hits[0].passage.aspect == "treatment" and "gout" in res.hits[0].passage.title.lower()
    assert searcher.prior_aspect("treatment") == "treatment" and searcher.prior_aspect("zzqq xx") is None
    with pytest.raises(QueryError, match="unknown aspect 'zzqq'"):
        searcher.search(Query("q", entity="gout", aspect="zzqq"))
    # --aspect-boost 0 switches the prior off, and with it the reading
    assert not searcher.search(q, SearchOptions(k=3, aspect_boost=0)).notices


def test_an_asked_aspect_no_section_has_is_said_not_implied(tmp_path):
    """On notes without headings no passage is of any aspect: an ⟨entity, aspect⟩ search still answers from the
    words, and says that no section is about the aspect, instead of showing the hits as if they were."""
    from capr.index import Index, build_index
    from capr.records import Document
    from capr.search import Searcher

    build_index([Document(f"n{i}", "", f"Patient {i} with hypertension on lisinopril {i} mg daily, stable.")
                 for i in range(4)], tmp_path / "idx")
    res = Searcher(Index.load(tmp_path / "idx")).search(Query("q", entity="hypertension", aspect="medications"),
                                                         SearchOptions(k=3))
    assert res.hits and any("no section of this index is about 'medications'" in n for n in res.notices)


def test_accented_headings_start_sections():
    """"EXPLORACIÓN FÍSICA:" is a heading as "PHYSICAL EXAM:" is (it used to stay inside the section before it, which
    then read as that aspect); English headings are found exactly as before."""
    from capr.corpus.segment import detect_headings

    text = ("MOTIVO DE CONSULTA: tos y fiebre.\nTRATAMIENTO ACTUAL: ninguno.\nEXPLORACIÓN FÍSICA: crepitantes.\n"
            "Diagnóstico: neumonía.\nPHYSICAL EXAM: crackles.\n")
    assert [h.heading for h in detect_headings(text)] == [
        "MOTIVO DE CONSULTA", "TRATAMIENTO ACTUAL", "EXPLORACIÓN FÍSICA", "Diagnóstico", "PHYSICAL EXAM"]


def _articles(tmp_path, overviews: int) -> "object":
    """Eight health articles with a Treatment section each; the first ``overviews`` open with an Overview."""
    from capr.corpus import read_documents
    from capr.index import build_index

    docs = []
    for i, disease in enumerate(["gout", "asthma", "psoriasis", "migraine", "eczema", "lupus", "anemia", "rosacea"]):
        text = (f"Overview:\n{disease.capitalize()} is a long-term condition that comes and goes over years.\n\n"
                if i < overviews else "")
        text += (f"Treatment:\n{disease.capitalize()} treatment: {disease} medicines for {disease} flares, and "
                 f"{disease} diet advice.\n")
        docs.append({"doc_id": disease, "title": disease.capitalize(), "text": text})
    src = tmp_path / "articles.jsonl"
    src.write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    return build_index(read_documents(src), tmp_path / f"idx{overviews}")


def test_what_is_x_favours_the_overview_only_where_overviews_are_the_corpus_convention(tmp_path):
    """"What is gout?" asks for the overview. Where most documents have one, its prior puts gout's overview above
    gout's treatment section (which names gout four times); where an overview heading is a stray one-off, the
    generic wording favours nothing, while an explicitly asked "information" aspect still does."""
    convention = Searcher(_articles(tmp_path, overviews=6))
    hits = convention.search("What is gout?", SearchOptions(k=2)).hits
    assert [(h.passage.doc_id, h.passage.aspect) for h in hits][0] == ("gout", "information")
    stray = Searcher(_articles(tmp_path, overviews=1))
    assert stray.query_prior_aspect(stray.parse("What is gout?")) is None
    assert stray.search("What is gout?", SearchOptions(k=1)).hits[0].passage.aspect == "treatment"
    assert stray.query_prior_aspect(stray.parse(Query("q", entity="gout", aspect="information"))) == "information"
    assert stray.query_prior_aspect(stray.parse("How is gout treated?")) == "treatment"  # specific wording: as before


def test_scores_fall_with_rank_across_the_entity_tiers(tmp_path):
    """A lower tier is ranked on its own and its best can outscore the tier above's last; the scores a client sees
    (and a run file that trec_eval sorts by score) must keep the ranking."""
    from capr.index import IndexWriter, load_index
    from capr.records import Document

    filler = " ".join(f"word{i}" for i in range(300))
    docs = [Document("named", "Clinic note", f"HISTORY:\nThe zorbifen trial. {filler}")]
    docs += [Document(f"other{i}", f"Note {i}", "PLAN:\n" + "Wheeze. " * (i + 1) + "Inhaler.") for i in range(3)]
    docs += [Document(f"filler{i}", f"Filler {i}", f"HISTORY:\nNothing of note {i}.") for i in range(20)]
    with IndexWriter(tmp_path / "idx") as w:
        for d in docs:
            w.add(d)
    searcher = Searcher(load_index(tmp_path / "idx"))
    res = searcher.search(Query("q", entity="zorbifen", aspect="plan"), SearchOptions(k=5, retriever="bm25"))
    ids = [h.passage.doc_id for h in res.hits]
    assert ids[0] == "named" and set(ids[1:4]) == {"other0", "other1", "other2"}  # the entity's tier first
    scores = [h.score for h in res.hits]
    assert scores == sorted(scores, reverse=True), scores
    assert [h.rank for h in res.hits] == list(range(1, len(res.hits) + 1))
    # the rest keep their own order and relative scores
    plain = searcher.search(Query("q", entity="zorbifen", aspect="plan"),
                            SearchOptions(k=5, retriever="bm25", entity_first=False))
    others = [h for h in plain.hits if h.passage.doc_id != "named"]
    assert [h.pid for h in others] == [h.pid for h in res.hits[1:4]]
    assert others[0].score > res.hits[0].score  # the case in point: the lower tier's best outscores the entity's
    ratios = [a.score / b.score for a, b in zip(others, res.hits[1:4])]
    assert max(ratios) == pytest.approx(min(ratios))


@pytest.mark.parametrize("scores", [[0.5, -0.2, 0.3, 0.1], [0.03, 0.02, 9.5, 7.0, 0.01, 3.0], [-1.0, 2.0, 1.0],
                                    [0.0, 0.5, 0.2], [1.0, 1.0, 2.0]])
def test_scores_falling_with_rank_keeps_each_part_in_its_order(scores):
    from capr.records import ScoredPassage
    from capr.search.present import scores_falling_with_rank

    hits = [ScoredPassage(pid=str(i), score=s, rank=i + 1) for i, s in enumerate(scores)]
    scores_falling_with_rank(hits)
    after = [h.score for h in hits]
    assert all(a >= b for a, b in zip(after, after[1:])), after
    assert all(a > b for a, b, x, y in zip(after, after[1:], scores, scores[1:]) if y > x)  # no tie made
    for i in range(len(scores)):  # within what was already falling, the order of the given scores holds
        for j in range(i + 1, len(scores)):
            if all(scores[t] >= scores[t + 1] for t in range(i, j)):
                assert (scores[i] > scores[j]) <= (after[i] > after[j])


def test_an_entity_nothing_mentions_or_matches_shows_nothing_and_says_no_more(tmp_path):
    from capr.index import IndexWriter, load_index
    from capr.records import Document

    with IndexWriter(tmp_path / "idx") as w:
        w.add(Document("d1", "Gout", "PLAN:\nColchicine for the flare."))
        w.add(Document("d2", "Asthma", "PLAN:\nInhaled steroids."))
    searcher = Searcher(load_index(tmp_path / "idx"))
    res = searcher.search(Query("q", entity="zorbifen"), SearchOptions(k=5, retriever="bm25"))
    assert res.hits == [] and res.notices == ["no passage mentions 'zorbifen'"]
    res = searcher.search(Query("q", entity="zorbifen colchicine"), SearchOptions(k=5, retriever="bm25"))
    assert res.hits and res.notices == ["no passage mentions 'zorbifen colchicine'; showing the closest matches"]
