"""Case-report readers (E3C, CodiEsp, OpenStax) and "patients like this one" (capr cases similar, CaseFinder,
POST /cases/similar) on small slices of the real corpora; skipped when the data is absent."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from capr.cases.icd10 import code_name, find_mentions
from capr.corpus import Format, detect_format, read_documents
from capr.errors import BadInputError, QueryError

from case_support import write_tiny_case_data
from conftest import capr_cli, capr_in_process, capr_real_or_in_process, need_data

CODIESP = ("codiesp", "cases.jsonl.gz")
E3C = ("e3c_english", "cases.jsonl.gz")


def _slice(path: Path, out: Path, n: int, keep=lambda r: True) -> Path:
    """The first ``n`` records of a real JSONL file that ``keep`` accepts, as a small file of the same format."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        rows = list(itertools.islice((r for r in map(json.loads, fh) if keep(r)), n))
    with gzip.open(out, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    return out


def test_readers_detect_and_read_the_real_files():
    expected = {E3C: (Format.e3c, 10_034), CODIESP: (Format.codiesp, 3_500),
                ("openstax", "ap2e.jsonl.gz"): (Format.openstax, 1_205),
                ("openstax", "microbiology.jsonl.gz"): (Format.openstax, 912)}
    for parts, (fmt, n) in expected.items():
        path = need_data(*parts)
        assert detect_format(path) is fmt
        docs = list(read_documents(path))
        assert len(docs) == n and len({d.doc_id for d in docs}) == n
    codiesp = list(read_documents(need_data(*CODIESP)))
    splits = {s: sum(d.metadata["split"] == s for d in codiesp) for s in ("train", "dev", "background")}
    assert splits == {"train": 500, "dev": 250, "background": 2750}
    first = codiesp[0]
    assert first.doc_id.startswith("codiesp:") and first.metadata["source"] == "codiesp"
    assert all(c == c.upper() and "." in c or len(c) == 3 for c in first.metadata["diagnoses"])
    assert "\n" not in first.text  # one sentence per line in the release; a paragraph here
    assert all(not d.metadata["diagnoses"] for d in codiesp if d.metadata["split"] == "background")


def test_a_bad_codiesp_record_names_line_and_field(tmp_path):
    path = tmp_path / "cases.jsonl"
    good = {"id": "a", "split": "train", "text": "Fever.", "diagnoses": ["r50.9"], "procedures": []}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "id": "b", "split": "test"}) + "\n")
    assert detect_format(path) is Format.codiesp
    # the release's test split reads (held-out coded cases are queries, never indexed by `capr case-index`)
    assert [d.metadata["split"] for d in read_documents(path)] == ["train", "test"]
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "id": "b", "split": "validation"}) + "\n")
    with pytest.raises(BadInputError) as e:
        list(read_documents(path))
    assert "line 2" in str(e.value) and "split" in str(e.value)
    path.write_text(json.dumps({**good, "diagnoses": "r50.9"}) + "\n")
    with pytest.raises(BadInputError, match="diagnoses"):
        list(read_documents(path, Format.codiesp))


def test_icd10_names_and_mentions():
    assert code_name("n45.3") == "Epididymo-orchitis"
    assert code_name("N45.39") == "Orchitis and epididymitis"  # unknown code: its category's name
    found = {d.code: d for d in find_mentions("Ascites and tender hepatomegaly; no malaria. Final diagnosis: "
                                              "nephrotic syndrome.")}
    assert {"R18", "R16.0", "N04"} <= set(found) and not any(c.startswith("B5") for c in found)  # malaria negated
    assert found["R16.0"].mention == "hepatomegaly" and found["R16.0"].kind == "mention"


def test_a_negation_governs_every_item_of_its_list():
    # a review of systems: every item denied, not only the first three words after the cue
    assert find_mentions("She denies chest pain, shortness of breath, palpitations, or syncope.") == []
    assert [d.code for d in find_mentions("No fever, cough, dyspnea or hemoptysis. History of asthma.")] == ["J45"]
    assert [d.code for d in find_mentions("There were no clinical signs of meningitis.")] == []
    # the scope ends with the clause: a full stop, a semicolon, "but", a new statement
    assert [d.code for d in find_mentions("No fever, but a long history of asthma.")] == ["J45"]
    assert [d.code for d in find_mentions("No hemoptysis; palpitations at night.")] == ["R00.2"]
    assert [d.code for d in find_mentions("Patient does not have asthma. Temperature 38.5 C, hemoptysis.")] == ["R04.2"]
    # "without" negates what follows it closely, not a list ("without apparent focus, dry cough")
    assert "R05" in [d.code for d in find_mentions("Fever without apparent focus, dry cough and anorexia.")]
    assert [d.code for d in find_mentions("Hypertension without treatment, heart failure for 6 years.")][-1:] == ["I50"]


@pytest.fixture(scope="module")
def case_index(tmp_path_factory):
    """150 labelled CodiEsp train cases and 150 E3C narratives, lexical index."""
    import capr

    tmp = tmp_path_factory.mktemp("similar")
    codiesp = _slice(need_data(*CODIESP), tmp / "codiesp.jsonl.gz", 150, lambda r: r["split"] == "train")
    e3c = _slice(need_data(*E3C), tmp / "e3c.jsonl.gz", 150)
    docs = itertools.chain(read_documents(codiesp), read_documents(e3c))
    return capr.build_index(docs, tmp / "idx")


def _query_case(index):
    doc = index.document(next(d for d in index.document_ids() if d.startswith("codiesp:")))
    return doc, " ".join(doc.text.split()[:80])


def test_similar_finds_the_case_itself_with_its_named_codes(case_index):
    from capr.cases.similar import CaseFinder

    finder = CaseFinder(case_index)
    doc, query = _query_case(case_index)
    res = finder.similar(query, k=5)
    top = res.cases[0]
    assert res.retriever == "bm25" and top.doc_id == doc.doc_id and top.labelled
    assert [d.code for d in top.diagnoses] == doc.metadata["diagnoses"]
    assert all(d.kind == "label" for d in top.diagnoses) and any(d.name for d in top.diagnoses)
    assert top.evidence and all(e.sentence in top.text and e.shared for e in top.evidence)
    assert top.evidence[0].query_sentence in query
    # the case held out: it is gone, and labelled_only keeps only coded cases
    others = finder.similar(query, k=5, exclude_docs=[doc.doc_id])
    assert doc.doc_id not in [c.doc_id for c in others.cases] and len(others.cases) == 5
    labelled = finder.similar(query, k=20, labelled_only=True)
    assert len(labelled.cases) == 20 and all(c.source == "codiesp" and c.labelled for c in labelled.cases)
    # an E3C case carries the ICD-10-CM names its own text mentions
    e3c = [c for c in finder.similar(query, k=50).cases if c.source == "e3c"]
    assert e3c and all(d.kind == "mention" and d.mention in c.text.lower() for c in e3c for d in c.diagnoses)
    with pytest.raises(QueryError, match="empty patient description"):
        finder.similar("  ")
    with pytest.raises(QueryError, match="needs passage vectors; build the index with `capr case-index`"):
        finder.similar(query, retriever="dense")


def test_likely_diagnoses_vote_and_match_names(case_index, tmp_path):
    """The likely diagnoses of a described patient on an index of coded cases: the codes of the most similar labelled
    cases, voted, fused with the conditions the best-matching passages name and the codes whose names match;
    symptom codes (R00-R99) after the diagnoses, labelled as findings."""
    import capr
    from capr.cases.similar import CaseFinder

    finder = CaseFinder(case_index)
    doc, query = _query_case(case_index)
    likely = finder.similar(query, k=3, diagnoses=8).diagnoses
    assert [d.rank for d in likely] == list(range(1, 9)) and len({(d.code, d.name) for d in likely}) == 8
    assert all(d.name and (d.code is None or d.code == d.code.upper()) for d in likely)
    kinds = [d.kind for d in likely]
    assert all(k == "finding" for k in kinds[kinds.index("finding"):]) if "finding" in kinds else True
    assert all((d.kind == "finding") == bool(d.code and d.code.startswith("R")) for d in likely if not d.profile)
    # the case itself is the most similar and carries its codes: its diagnoses lead, voted by it
    own = [c for c in doc.metadata["diagnoses"] if not c.startswith("R")]
    top = [d for d in likely[:5] if d.code in own]
    assert top and all(d.cases >= 1 and "votes" in d.sources and doc.doc_id in d.case_ids for d in top)
    # a description that only names a diagnosis gets it through its name
    space = set(finder.name_matcher().codes)
    named = next(c for c in sorted(space) if not c.startswith("R") and len(code_name(c).split()) >= 2
                 and "," not in code_name(c))
    by_name = finder.similar(code_name(named), k=1, diagnoses=50).diagnoses
    hit = next(d for d in by_name if d.code == named)
    assert "names" in hit.sources and hit.rank <= 10
    assert finder.similar(query, k=1, diagnoses=0).diagnoses == []
    # without coded cases nor profiles, only the conditions that the passages name
    e3c_only = capr.build_index(read_documents(_slice(need_data(*E3C), tmp_path / "e3c.jsonl.gz", 30)), tmp_path / "e3c")
    assert all(d.sources == ["passages"] and d.cases == 0 for d in CaseFinder(e3c_only).similar(query, k=2).diagnoses)


def test_the_description_itself_and_repeated_reports_are_not_similar_cases(case_index, tmp_path):
    import capr
    from capr.cases.similar import CaseFinder
    from capr.records import Document

    # the description is a case of the index, pasted whole: not its own most similar patient, nor a voter for its codes
    doc, _ = _query_case(case_index)
    res = CaseFinder(case_index).similar(doc.text + "\n", k=5, diagnoses=0)
    assert doc.doc_id not in [c.doc_id for c in res.cases] and len(res.cases) == 5
    assert any(doc.doc_id in n and "description itself" in n for n in res.notices)
    finder = CaseFinder(case_index)
    pasted = finder.similar(doc.text, k=1, diagnoses=20).diagnoses
    held_out = finder.similar(doc.text, k=1, diagnoses=20, exclude_docs=[doc.doc_id]).diagnoses
    assert [(d.code, d.cases) for d in pasted] == [(d.code, d.cases) for d in held_out]
    # one report twice in a corpus (E3C repeats a few word for word): one patient, listed once
    text = "A 56-year-old man with persistent hematuria from bladder cancer was referred for peritoneal carcinosis."
    idx = capr.build_index([Document("r1", "", text), Document("r2", "", "  " + text.upper()),
                            Document("r3", "", "A man with hematuria and a bladder tumour.")], tmp_path / "dup")
    res = CaseFinder(idx).similar("hematuria from bladder cancer in a 56-year-old man", k=3)
    assert [c.doc_id for c in res.cases] == ["r1", "r3"]
    assert any("r2 repeats r1" in n for n in res.notices)


def test_cli_similar(case_index, runner):
    doc, query = _query_case(case_index)
    proc = capr_in_process(runner, "cases", "similar", query, "--index", str(case_index.root), "-k", "3", "--json")
    data = json.loads(proc.stdout)
    assert data["cases"][0]["doc_id"] == doc.doc_id and len(data["cases"]) == 3
    assert data["cases"][0]["diagnoses"][0]["code"] == doc.metadata["diagnoses"][0]
    text = capr_in_process(runner, "cases", "similar", query, "--index", str(case_index.root), "-k", "1").stdout
    assert doc.doc_id in text and "diagnoses:" in text
    first = data["diagnoses"][0]
    assert "differential diagnosis" in text and f"1. {first['code'] + ' ' if first['code'] else ''}{first['name']}" in text
    assert [d["rank"] for d in data["diagnoses"]] == list(range(1, 11))
    assert "differential diagnosis" not in capr_in_process(runner, "cases", "similar", query, "--index", str(case_index.root),
                                                     "-k", "1", "--diagnoses", "0").stdout
    bad = capr_cli("cases", "similar", " ", "--index", str(case_index.root), check=False)  # the real command
    assert bad.returncode == 2 and "empty patient description" in bad.stderr and "Traceback" not in bad.stderr


def test_a_description_file_that_is_not_utf8_is_one_clear_error(case_index, tmp_path, runner):
    latin1 = tmp_path / "note.txt"
    latin1.write_bytes("Fi\u00e8vre et toux depuis trois jours.".encode("latin-1"))
    for n, args in enumerate((("cases", "similar", str(latin1), "--index", str(case_index.root)),
                              ("cases", "--index", str(case_index.root), "-d", str(latin1), "--options", "fever"))):
        proc = capr_real_or_in_process(runner, n == 0, *args, check=False)
        assert proc.returncode == 2 and "not UTF-8" in proc.stderr and str(latin1) in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


def test_service_similar(case_index):
    from fastapi.testclient import TestClient

    from capr.service import ServiceConfig, create_app

    doc, query = _query_case(case_index)
    client = TestClient(create_app(case_index.root, ServiceConfig()))
    r = client.post("/cases/similar", json={"description": query, "k": 2})
    assert r.status_code == 200, r.text
    data = r.json()
    assert [c["rank"] for c in data["cases"]] == [1, 2] and data["cases"][0]["doc_id"] == doc.doc_id
    assert data["cases"][0]["diagnoses"][0]["kind"] == "label" and data["cases"][0]["document_url"]
    from capr.cases.similar import CaseFinder

    library = CaseFinder(case_index).similar(query, k=2, diagnoses=4).diagnoses
    r4 = client.post("/cases/similar", json={"description": query, "k": 2, "diagnoses": 4}).json()
    assert r4["diagnoses"] == [d.to_dict() for d in library] and len(library) == 4
    assert client.post("/cases/similar", json={"description": " "}).status_code == 422
    assert client.post("/cases/similar", json={"description": query, "k": 0}).status_code == 422
    assert client.post("/cases/similar", json={"description": query, "retriever": "dense"}).status_code == 400


def test_similar_case_metrics():
    from capr.cases.similar_eval import (
        average_precision_of,
        category_precision,
        fuse_rankings,
        rrf,
        score_case_ranking,
        score_code_ranking,
        vote,
    )

    cases = [["N45.3", "R50.9"], ["A23.9"], ["N45.9", "A23.9"]]
    assert vote(cases) == ["N45.3", "R50.9", "A23.9", "N45.9"]  # 1, 1, 1/2 + 1/3, 1/3
    assert vote(cases, level="category") == ["N45", "R50", "A23"]
    assert category_precision(["N45.1"], cases, k=3) == pytest.approx(2 / 3)
    assert average_precision_of(["a", "x", "b"], {"a", "b", "c"}) == pytest.approx((1 + 2 / 3) / 3)  # c never ranked
    q = score_case_ranking("q", ["A23.9", "Z99.9"], cases)
    assert q.ap == pytest.approx((1 / 3) / 2) and q.precision == pytest.approx(2 / 10)
    fused = rrf({"a": np.array([3.0, 2.0, 1.0]), "b": np.array([1.0, 2.0, 3.0])}, {"a": 1.0, "b": 4.0})
    assert int(np.argmax(fused)) == 2
    # votes fused with a direct ranking: a code both rank high wins; a weight of 0 leaves a ranking out
    votes, names = ["A23.9", "N45.3", "R50.9"], ["N45.3", "Z99.9", "A23.9"]
    assert fuse_rankings({"votes": votes, "names": names}, {"votes": 1.0, "names": 1.0}, k=1) == \
        ["N45.3", "A23.9", "Z99.9", "R50.9"]  # 1/3 + 1/2, 1/2 + 1/4, 1/3, 1/4
    assert fuse_rankings({"votes": votes, "names": names}, {"votes": 1.0, "names": 0.0}) == votes
    q = score_code_ranking("q", ["N45.3"], ["N45.3", "A23.9"], cases)
    assert q.ap == 1.0 and q.precision == pytest.approx(2 / 10)


def test_diagnosis_pairs_mask_mentions_and_refuse_dev():
    from capr.cases.train_diagnoses import MASK, diagnosis_pairs
    from capr.records import Document

    coded = Document("codiesp:a", "", "Fever and epididymo-orchitis.", {"split": "train", "diagnoses": ["N45.3", "R50.9"]})
    uncoded = Document("e3c:b", "", "A man with Nephrotic syndrome and ascites.", {"source": "e3c"})
    pairs, counts = diagnosis_pairs([coded, uncoded])
    assert counts == {"codes": 2, "mentions": 2}
    assert ("Fever and epididymo-orchitis.", "Epididymo-orchitis") in pairs
    masked = next(t for t, n in pairs if n == "Nephrotic syndrome")
    assert "nephrotic" not in masked.lower() and MASK in masked and "ascites" in masked
    with pytest.raises(BadInputError, match="dev case"):
        diagnosis_pairs([Document("codiesp:c", "", "Fever.", {"split": "dev", "diagnoses": ["R50.9"]})])


def test_cli_train_diagnoses_runs_a_few_steps_and_the_model_encodes(tmp_path, runner):
    from capr.models.encoder import Encoder, EncoderConfig

    data = write_tiny_case_data(tmp_path / "data")
    out = tmp_path / "enc"
    proc = capr_cli("train", "diagnoses", "--data-dir", str(data), "--out", str(out), "--max-steps", "3",
                    "--batch-size", "4", "--time-budget", "5", "--device", "cpu", "--json")
    summary = json.loads(proc.stdout)
    assert summary["steps"] == 3 and summary["stopped"] == "max_steps" and summary["device"] == "cpu"
    assert summary["source"]["codes"] == 16 and summary["source"]["mentions"] >= 4  # dev cases unread
    # the count; no progress bar frames in a pipe (live only on a terminal)
    assert "pairs" in proc.stderr and "training diagnosis encoder" not in proc.stderr
    card = json.loads((out / "capr.json").read_text())
    assert card["kind"] == "diagnosis-encoder" and card["steps"] == 3 and card["args"]["time_budget_min"] == 5
    vecs = Encoder(EncoderConfig(model=str(out), max_length=64)).encode_passages(["fever", "kidney stone"])
    assert vecs.shape == (2, 384)
    from capr.cases.train_diagnoses import corpus_pairs

    pairs, counts = corpus_pairs(data, codes_only=True)
    assert counts == {"codes": 16, "mentions": 0} and not any("Dev case" in t for t, _ in pairs)
    bad = capr_in_process(runner, "train", "diagnoses", "--data-dir", str(tmp_path / "nowhere"), "--out",
                          str(tmp_path / "x"), check=False)
    assert bad.returncode != 0 and "cases.jsonl.gz: not found" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "x").exists()


def test_a_users_own_notes_are_cases_and_reference_texts_are_not(tmp_path, runner):
    """Notes added to a case index (`capr case-index --add`, a MIMIC or FHIR export: another source, or none) are
    patient descriptions; reference texts (MedQuAD, OpenStax...) never are. A case sharing no word with the
    description is not returned as similar at score 0, and a description with no searchable word is refused."""
    import capr
    from capr.cases.similar import CaseFinder
    from capr.records import Document

    docs = [Document("codiesp:1", "", "A 60-year-old woman with fever and a productive cough; pneumonia.",
                     {"source": "codiesp"}),
            Document("my-1", "", "A 37-year-old man with fever, a swollen painful right testicle after fresh goat "
                     "cheese: brucellosis.", {"source": "user"}),
            Document("note-7", "", "Swollen testicle and fever in a farmer; Brucella serology positive.", {}),
            Document("GARD_9", "Brucellosis", "Brucellosis is an infection spread from animals; fever, testicle "
                     "swelling.", {"source": "GARD"}),  # a MedQuAD page: its source is its collection
            Document("openstax:3", "Brucella", "Brucella: fever and a swollen testicle.", {"source": "openstax"})]
    finder = CaseFinder(capr.build_index(docs, tmp_path / "idx"))
    found = [c.doc_id for c in finder.similar("fever and a swollen testicle after goat cheese", k=10).cases]
    assert found[:2] == ["my-1", "note-7"] and "GARD_9" not in found and "openstax:3" not in found
    assert "codiesp:1" in found  # it shares "fever"
    assert [c.doc_id for c in finder.similar("goat cheese", k=10).cases] == ["my-1"]  # no zero-score fill
    with pytest.raises(QueryError, match="no searchable words"):
        finder.similar("the of and")
    with pytest.raises(QueryError, match="evidence must be 0 or more"):
        finder.similar("goat cheese", evidence=-1)
    proc = capr_in_process(runner, "cases", "similar", str(tmp_path / "missing" / "case.txt"), "--index",
                           str(tmp_path / "idx"), check=False)  # a mistyped file is said so, not searched for its words
    assert proc.returncode == 2 and "no such file" in proc.stderr and "Traceback" not in proc.stderr


def test_a_description_with_no_searchable_word_is_refused_naming_the_description(tmp_path):
    """"!!!" or "the of and" describes no patient: on an index with vectors the default (hybrid) refuses it as bm25
    does (as POST /search refuses such a question), rather than returning the dense side's nearest cases as "similar
    patients"; POST /cases/similar names the field at fault, the description."""
    import capr
    from fastapi.testclient import TestClient

    from capr.cases.similar import CaseFinder
    from capr.models import EncoderConfig
    from capr.records import Document
    from capr.service import ServiceConfig, create_app

    docs = [Document("my-1", "", "A 37-year-old man with fever and a swollen right testicle: brucellosis.", {}),
            Document("my-2", "", "A 60-year-old woman with a productive cough; pneumonia.", {})]
    finder = CaseFinder(capr.build_index(docs, tmp_path / "dense", dense=EncoderConfig()))
    for description in ("!!!", "the of and"):
        with pytest.raises(QueryError, match="no searchable words") as e:
            finder.similar(description)  # auto: hybrid on this index
        assert e.value.field == "description"
    assert finder.similar("!!!", retriever="dense").cases  # dense embeds any text, as `capr search -r dense` does
    assert finder.similar("fever and a swollen testicle").cases[0].doc_id == "my-1"
    capr.build_index(docs, tmp_path / "lexical")
    client = TestClient(create_app(tmp_path / "lexical", ServiceConfig(warm_up=False)))
    r = client.post("/cases/similar", json={"description": "!!!"})
    assert r.status_code == 400 and r.json()["field"] == "description", r.text
    r = client.post("/cases/similar", json={"description": "fever", "retriever": "dense"})
    assert r.status_code == 400 and r.json()["field"] == "retriever", r.text


CASE_INDEX_OPTIONS = [
    (("--codiesp-split", "bogus"), "unknown CodiEsp split(s) bogus; choose from train, dev, test, background"),
    (("--max-tokens", "-5"), "--max-tokens must be 0 or more, got -5"),
    (("--max-length", "0"), "--max-length must be at least 1, got 0"),
    (("--mtsamples-notes", "-1"), "--mtsamples-notes must be 0 or more, got -1")]


@pytest.mark.parametrize("args, message", CASE_INDEX_OPTIONS)
def test_case_index_options_out_of_range_are_refused_and_the_index_kept(tmp_path, runner, args, message):
    """An unknown --codiesp-split matched no case: the CodiEsp cases were left out without a word. A negative
    --max-tokens indexed whole sections, a negative --mtsamples-notes no note, --max-length 0 was taken. Each is one
    line naming the option, and the index at --out stays as it was."""
    data = write_tiny_case_data(tmp_path / "data")
    idx = tmp_path / "idx"
    common = ("case-index", "--data-dir", str(data), "--out", str(idx), "--source", "codiesp", "--source", "e3c",
              "--no-dense")
    capr_in_process(runner, *common)
    before = (idx / "CURRENT").read_text()
    real = (args, message) == CASE_INDEX_OPTIONS[0]  # the real command once, the rest in process
    proc = capr_real_or_in_process(runner, real, *common, *args, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1, proc.stderr
    assert message in proc.stderr
    assert (idx / "CURRENT").read_text() == before


def test_the_codes_list_ranks_codes_as_the_similar_cases_were_coded(case_index, runner):
    """Beside the differential, the coder's list: the similar coded cases' votes fused with the codes whose names
    match, symptom codes (R00–R99) among the rest as coders code them; the same in the library, --json and the
    service."""
    from fastapi.testclient import TestClient

    from capr.cases.similar import CaseFinder
    from capr.cases.similar_eval import fuse_rankings, vote
    from capr.service import ServiceConfig, create_app

    finder = CaseFinder(case_index)
    doc, query = _query_case(case_index)
    res = finder.similar(query, k=3, diagnoses=15)
    codes = [c.code for c in res.codes]
    assert [c.rank for c in res.codes] == list(range(1, 16)) and len(set(codes)) == 15
    voters = [[d.code for d in c.diagnoses] for c in finder.similar(query, k=20, labelled_only=True).cases]
    names = finder.name_matcher()
    assert codes == fuse_rankings({"votes": vote(voters), "names": names.ranked(set(names.analyze(query)))},
                                  {"votes": 1.0, "names": 1.0})[:15]
    assert all(c.name == code_name(c.code) for c in res.codes)
    # the case itself is the most similar: its codes lead the codes list, its symptom codes among them
    assert codes[0] in doc.metadata["diagnoses"]
    symptoms = [c for c in doc.metadata["diagnoses"] if c.startswith("R")]
    assert not symptoms or set(symptoms) & set(codes)
    data = json.loads(capr_in_process(runner, "cases", "similar", query, "--index", str(case_index.root), "-k", "1",
                                      "--diagnoses", "15", "--json").stdout)
    assert [c["code"] for c in data["codes"]] == codes and {"name", "rank", "score", "cases"} <= set(data["codes"][0])
    text = capr_in_process(runner, "cases", "similar", query, "--index", str(case_index.root), "-k", "1").stdout
    assert "likely codes" in text and f"1. {codes[0]} {code_name(codes[0])}" in text
    client = TestClient(create_app(case_index.root, ServiceConfig()))
    served = client.post("/cases/similar", json={"description": query, "k": 3, "diagnoses": 15}).json()
    assert served["codes"] == [c.to_dict() for c in res.codes]
    assert finder.similar(query, k=1, diagnoses=0).codes == []
