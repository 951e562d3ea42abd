"""One search pipeline: `capr search`, `POST /search` and the Python API go through the same Searcher, so
they rank the same passages with the same scores, highlights and evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from capr.cli import app
from capr.query import parse_query
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
