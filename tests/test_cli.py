"""The `capr` command line, end to end through the real entry point: each test runs it at least once as the real
command; the cases and queries it repeats run in process (a subprocess costs a second or more of imports each)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from capr.cli import app

from conftest import capr_cli, capr_in_process, capr_real_or_in_process, need_data, write_jsonl


@pytest.fixture(scope="module")
def demo_index(tmp_path_factory, demo_dir) -> Path:
    out = tmp_path_factory.mktemp("cli") / "idx"
    # lexical-only: these tests are about the CLI's options and output (the default, dense index is
    # test_default_pipeline.py's)
    proc = capr_cli("index", "--lexical-only", str(demo_dir), "--out", str(out))
    assert "indexed 36 documents" in proc.stderr
    return out


def test_search_json_structured(demo_index):
    proc = capr_cli("search", str(demo_index), "--entity", "IgA nephropathy", "--aspect", "symptoms", "-k", "3", "--json")
    res = json.loads(proc.stdout)
    assert res["query"] == {"text": None, "entity": "IgA nephropathy", "aspect": "symptoms"}
    top = res["results"][0]
    assert top["rank"] == 1 and top["aspect"] == "symptoms" and "IgA" in top["title"]
    assert len(res["results"]) == 3 and res["results"][0]["score"] >= res["results"][1]["score"]
    # highlights are document offsets of query terms
    words = {top["text"][a - top["start"]:b - top["start"]].lower() for a, b in top["highlights"]}
    assert words & {"symptoms", "iga", "nephropathy", "signs"}


def test_search_free_text_with_filter_and_rich_output(runner, demo_index):
    res = runner.invoke(app, ["search", str(demo_index), "how is atrial fibrillation treated", "--filter", "aspect=treatment", "-k", "2"])
    assert res.exit_code == 0, res.output
    assert "Atrial fibrillation" in res.output and "treatment" in res.output and "score" in res.output


SEARCH_BAD_INPUT = [
    (["   "], "empty query"),
    (["--aspect", "symptons", "--entity", "gout"], "unknown aspect 'symptons'"),
    (["gout", "--filter", "ward=3"], "unknown filter field 'ward'"),
    (["gout", "--filter", "aspect"], "bad filter 'aspect'"),
]


@pytest.mark.parametrize("args,message", SEARCH_BAD_INPUT)
def test_search_bad_input_is_one_clear_line(demo_index, runner, args, message):
    real = (args, message) == SEARCH_BAD_INPUT[0]
    proc = capr_real_or_in_process(runner, real, "search", str(demo_index), *args, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_index_bad_input_fails_then_skip_bad_reports(tmp_path, demo_dir):
    src = tmp_path / "src"
    shutil.copytree(demo_dir, src)
    (src / "empty.txt").write_bytes(b"")
    (src / "scan.txt").write_bytes(b"\x00\x01\x02binary")
    out = tmp_path / "idx"
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(out), check=False)
    assert proc.returncode == 2 and "empty.txt: file is empty" in proc.stderr and "Traceback" not in proc.stderr
    assert not (out / "CURRENT").exists()
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(out), "--skip-bad")
    assert "2 bad record(s) skipped" in proc.stderr
    assert "empty.txt: file is empty" in proc.stderr and "scan.txt: binary file" in proc.stderr
    assert json.loads((out / (out / "CURRENT").read_text().strip() / "manifest.json").read_text())["counts"]["documents"] == 36


def test_index_over_an_existing_index_asks_for_replace(tmp_path, runner):
    """`capr index SRC --out IDX` where IDX holds an index (of other documents, maybe) refuses in one line and leaves
    it as it was; --replace replaces it; `capr add` adds to it."""
    first = write_jsonl(tmp_path / "first.jsonl", [{"id": "a", "text": "PLAN: rest."}, {"id": "b", "text": "PLAN: fluids."}])
    other = write_jsonl(tmp_path / "other.jsonl", [{"id": "z", "text": "PLAN: colchicine."}])
    out = tmp_path / "idx"
    capr_in_process(runner, "index", "--lexical-only", str(first), "--out", str(out))
    before = (out / "CURRENT").read_text()
    proc = capr_real_or_in_process(runner, True, "index", "--lexical-only", str(other), "--out", str(out), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{out} is an index already (2 documents); add --replace to replace it" in proc.stderr
    assert (out / "CURRENT").read_text() == before
    capr_in_process(runner, "index", "--lexical-only", str(other), "--out", str(out), "--replace")
    from capr.index import load_index

    assert load_index(out).document_ids() == ["z"]


def test_index_invalid_xml_and_unknown_format(tmp_path, runner):
    bad = tmp_path / "MedQuAD-broken.xml"
    bad.write_text("<Document id='9'><QAPairs><QAPair><Answer>unterminated")
    proc = capr_cli("index", "--lexical-only", str(bad), "--out", str(tmp_path / "i"), check=False)
    assert proc.returncode == 2 and "MedQuAD-broken.xml: invalid XML" in proc.stderr
    proc = capr_in_process(runner, "index", "--lexical-only", str(bad), "--out", str(tmp_path / "i"), "--format", "docx",
                           check=False)
    assert proc.returncode == 2 and "docx" in proc.stderr and "Traceback" not in proc.stderr


def test_a_query_without_accents_finds_and_highlights_the_accented_word(tmp_path, runner):
    src = write_jsonl(tmp_path / "notes.jsonl", [
        {"doc_id": "menieres", "title": "Vertigo clinic", "text": "SYMPTOMS:\nMénière's disease with episodic vertigo."},
        {"doc_id": "sjogren", "title": "Dry eyes", "text": "HISTORY:\nSjögren syndrome, dry mouth and dry eyes."},
        {"doc_id": "other", "title": "Knee", "text": "HISTORY:\nOsteoarthritis of the knee."},
    ])
    folded, kept = tmp_path / "folded", tmp_path / "kept"
    capr_cli("index", "--lexical-only", str(src), "--out", str(folded))
    capr_in_process(runner, "index", "--lexical-only", "--keep-accents", str(src), "--out", str(kept))
    for query, doc_id, word in [("meniere", "menieres", "Ménière"), ("sjogren", "sjogren", "Sjögren")]:
        res = json.loads(capr_real_or_in_process(runner, query == "meniere", "search", str(folded), query, "--json").stdout)
        top = res["results"][0]
        assert top["doc_id"] == doc_id
        assert word in {top["text"][a - top["start"]:b - top["start"]] for a, b in top["highlights"]}
        # an index that keeps accents reads its queries as it read its text: the plain spelling is another word
        res = json.loads(capr_in_process(runner, "search", str(kept), query, "--json").stdout)
        assert all(r["doc_id"] != doc_id for r in res["results"])
        res = json.loads(capr_in_process(runner, "search", str(kept), word, "--json").stdout)
        assert res["results"][0]["doc_id"] == doc_id


def test_index_mtsamples_real(tmp_path):
    src = need_data("mtsamples", "mtsamples.csv.gz")
    out = tmp_path / "mts"
    proc = capr_cli("index", "--lexical-only", str(src), "--out", str(out))
    assert "indexed 2357 documents" in proc.stderr and "33 empty record(s) ignored" in proc.stderr
    res = json.loads(capr_cli("search", str(out), "--entity", "hypertension", "--aspect", "family history", "-k", "5", "--json").stdout)
    assert [r["aspect"] for r in res["results"]] == ["family history"] * 5
    assert "hypertension" in res["results"][0]["text"].lower()
    res = json.loads(capr_cli("search", str(out), "seizure", "--filter", "specialty=Neurology", "--json").stdout)
    assert len(res["results"]) == 10 and {r["metadata"]["specialty"] for r in res["results"]} == {"Neurology"}


def test_stats_reports_sections_and_aspects(tmp_path):
    src = need_data("mtsamples", "mtsamples.csv.gz")
    res = json.loads(capr_cli("stats", str(src), "--json").stdout)
    assert res["documents"] == 2357 and res["sections"] > 15000 and len(res["top_aspects"]) == 30
    top = [a for a, _ in res["top_aspects"][:10]]
    assert "physical examination" in top and "history of present illness" in top


@pytest.mark.parametrize("top", ["0", "-1"])
def test_stats_refuses_a_top_below_one_in_one_line(demo_dir, runner, top):
    """--top 0 or a negative one printed an empty table of aspects; it is refused as other commands' counts are."""
    proc = capr_real_or_in_process(runner, top == "0", "stats", str(demo_dir), "--top", top, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and not proc.stdout
    assert proc.stderr.strip() == f"error: --top must be at least 1, got {top}"


def test_dense_and_hybrid_search_from_the_cli(tmp_path, demo_dir, runner):
    out = tmp_path / "dense"
    proc = capr_cli("index", str(demo_dir), "--out", str(out), "--dense")
    assert "36 documents" in proc.stderr
    for retriever in ("dense", "hybrid"):
        res = json.loads(capr_in_process(runner, "search", str(out), "anticoagulant for an irregular heartbeat", "-r",
                                         retriever, "-k", "3", "--json").stdout)
        assert res["retriever"] == retriever
        assert any("atrial fibrillation" in (r["title"] + r["text"]).lower() for r in res["results"])
    res = json.loads(capr_in_process(runner, "search", str(out), "--entity", "IgA nephropathy", "--aspect", "symptoms",
                                     "-r", "hybrid", "--fusion", "weighted", "--template", "question", "--json").stdout)
    assert res["results"][0]["aspect"] == "symptoms"
    bad = capr_cli("search", str(out), "x", "-r", "dense", "--template", "poem", check=False)
    assert bad.returncode == 2 and "unknown query template 'poem'" in bad.stderr
    lexical_only = tmp_path / "lex"
    capr_in_process(runner, "index", "--lexical-only", str(demo_dir), "--out", str(lexical_only))
    bad = capr_in_process(runner, "search", str(lexical_only), "x", "-r", "dense", check=False)
    assert bad.returncode == 2 and "index has no vectors" in bad.stderr


def test_eval_hybrid_with_static_encoder(tmp_path):
    data = need_data("medquad_cdv_test").parent
    res = json.loads(capr_cli("eval", "--benchmark", "medquad-cdv", "--data-dir", str(data), "--retriever", "hybrid",
                              "--backend", "static", "--protocol", "rerank64", "--query-field", "tuple",
                              "--cache-dir", str(tmp_path / "c"), "--json").stdout)
    assert res["retriever"] == "hybrid" and res["encoder"]["backend"] == "static" and res["fusion"] == "rrf"
    assert res["queries"] == 3293 and res["metrics"]["R@5"] > 50
