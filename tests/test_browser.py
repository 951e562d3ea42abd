"""The search page in a real browser: Playwright driving Debian's headless chromium against a live server.

`.ci/run` installs chromium with apt-get when it is missing; set CAPR_CHROMIUM to use another binary.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from capr.service import ServiceConfig, create_app
from service_support import AUTH, TOKEN, LiveServer, build_demo_index, build_dense_demo_index, copy_index


def _chromium() -> str | None:
    for candidate in (os.environ.get("CAPR_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and (path := shutil.which(candidate)):
            return path
    return None


CHROMIUM = _chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary found (apt-get install chromium, or set CAPR_CHROMIUM)")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    # playwright cannot download its own browser here: it drives the system's chromium
    args = ["--no-sandbox"] if os.geteuid() == 0 else []  # chromium refuses its sandbox as root
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        yield b
        b.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, demo_dir):
    root = tmp_path_factory.mktemp("browser")
    index_dir = copy_index(build_demo_index(demo_dir, root / "template"), root / "idx")
    with LiveServer(create_app(index_dir, ServiceConfig(tokens=(TOKEN,)))) as s:
        yield s


@pytest.fixture
def page(browser, server):
    context = browser.new_context(viewport={"width": 1200, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # 4xx answers to deliberately bad searches are logged by chromium as failed loads; anything else is a bug
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "status of 4" not in m.text else None)
    page.goto(server.url + "/")
    # (expect() polls from Python: the page's CSP forbids the eval that wait_for_function needs)
    expect(page.locator("#index-info")).to_contain_text("documents")
    yield page
    context.close()
    assert not errors, errors  # no script errors, no failed loads (CSP violations show up here too)


def test_structured_query_shows_highlighted_evidence_and_chart(page):
    page.fill("#entity", "IgA")
    expect(page.locator("#entity-options option[value='IgA nephropathy']")).to_have_count(1)
    options = page.eval_on_selector_all("#entity-options option", "els => els.map(e => e.value)")
    assert "IgA nephropathy" in options  # autocomplete from the index's titles
    page.fill("#entity", "IgA nephropathy")
    page.fill("#aspect", "sympt")
    expect(page.locator("#aspect-options option[value='symptoms']")).to_have_count(1)
    page.fill("#aspect", "symptoms")
    page.click("#search-button")
    page.wait_for_selector("#results li.result")
    assert "passages in" in page.inner_text("#status")
    first = page.locator("#results li.result").first
    assert first.locator("h3 a").inner_text() == "IgA nephropathy"
    assert first.locator(".badge.aspect").inner_text() == "symptoms"
    marks = first.locator("mark.evidence")
    assert marks.count() >= 1
    terms = [t.lower() for t in first.locator("strong.term").all_inner_texts()]
    assert "symptoms" in terms
    evidence_text = " ".join(marks.all_inner_texts())
    assert "symptoms" in evidence_text.lower()
    # one bar per sentence; evidence bars marked; the chart is described for screen readers
    bars = first.locator("svg rect")
    n_sentences = int(page.evaluate("(el) => new Set([...el.querySelectorAll('.sent')].map(s => s.dataset.sent)).size",
                                    first.element_handle()))
    assert bars.count() == n_sentences > 3
    n_evidence = int(page.evaluate("(el) => new Set([...el.querySelectorAll('.sent')].filter(s => s.querySelector('mark.evidence'))"
                                   ".map(s => s.dataset.sent)).size", first.element_handle()))
    assert first.locator("svg rect.evidence").count() == n_evidence >= 1
    assert "evidence" in first.locator("svg").get_attribute("aria-label")
    # the document link opens the whole document with the passage marked
    first.locator("h3 a").click()
    page.wait_for_selector("#document:not([hidden])")
    assert page.inner_text("#doc-title") == "IgA nephropathy"
    assert page.inner_text("#doc-passage").startswith("## Symptoms")


def test_document_added_through_the_api_is_found_in_the_page(page, server):
    doc = {"doc_id": "browser_note_1", "title": "Ferrocalcinosis clinic note",
           "text": "ASSESSMENT AND PLAN: Ferrocalcinosis confirmed on biopsy. Start chelorimab 40 mg weekly."}
    r = httpx.post(server.url + "/documents", json=doc, headers=AUTH)
    assert r.status_code == 201, r.text
    page.fill("#text", "chelorimab for ferrocalcinosis")
    page.click("#search-button")
    page.wait_for_selector("#results li.result")
    first = page.locator("#results li.result").first
    assert first.get_attribute("data-doc-id") == "browser_note_1"
    assert first.locator("h3 a").inner_text() == "Ferrocalcinosis clinic note"
    assert {"chelorimab", "ferrocalcinosis"} <= {t.lower() for t in first.locator("strong.term").all_inner_texts()}
    assert "chelorimab" in " ".join(first.locator("mark.evidence").all_inner_texts())
    r = httpx.delete(server.url + "/documents/browser_note_1", headers=AUTH)
    assert r.status_code == 200
    page.click("#search-button")
    expect(page.locator("#results li.result[data-doc-id='browser_note_1']")).to_have_count(0)


def test_a_document_that_cannot_be_opened_says_so_and_leaves_no_other_open(page, server):
    """A listed case (or passage) whose document was deleted since: clicking it shows the server's reason in the view
    in use, and does not leave the document opened before on screen under the click."""
    for i in (1, 2):
        doc = {"doc_id": f"browser_gone_{i}", "title": f"Gone note {i}",
               "text": f"Zorbitis with quuxomab rash, case {i}. The rash of zorbitis cleared on quuxomab."}
        r = httpx.post(server.url + "/documents", json=doc, headers=AUTH)
        assert r.status_code == 201, r.text
    try:
        page.click("#tab-cases")
        page.fill("#case-description", "Zorbitis with a quuxomab rash.")
        page.click("#cases-button")
        expect(page.locator("#cases-status")).not_to_have_text("Searching…", timeout=120_000)
        one, two = (page.locator(f"#cases li.case[data-doc-id='browser_gone_{i}'] h3 a") for i in (1, 2))
        one.click()
        expect(page.locator("#doc-meta")).to_have_text("browser_gone_1")
        assert httpx.delete(server.url + "/documents/browser_gone_2", headers=AUTH).status_code == 200
        two.click()
        expect(page.locator("#cases-status.error")).to_contain_text("no document with id 'browser_gone_2'")
        expect(page.locator("#document")).to_be_hidden()
    finally:
        for i in (1, 2):
            httpx.delete(server.url + f"/documents/browser_gone_{i}", headers=AUTH)


def test_filters_and_error_messages(page):
    page.fill("#text", "atrial fibrillation")
    page.select_option("#filter-field", "aspect")
    page.fill("#filter-value", "treatment")
    page.click("#add-filter")
    assert page.inner_text("#filters").startswith("aspect = treatment")
    page.click("#search-button")
    page.wait_for_selector("#results li.result")
    aspects = set(page.locator("#results .badge.aspect").all_inner_texts())
    assert aspects == {"treatment"}
    # a query error is shown as an alert with the server's message, and no results
    page.fill("#aspect", "sympt0ms")
    page.click("#search-button")
    page.wait_for_selector("#status.error")
    assert "did you mean symptoms" in page.inner_text("#status")
    assert page.get_attribute("#status", "role") == "alert"
    assert page.locator("#results li").count() == 0


def test_search_notices_are_shown_with_the_results(page, server):
    """An entity no passage mentions gets the closest matches and a notice saying so (as `capr search` prints it):
    the page shows that notice, not only "10 passages", which reads as answers about the entity."""
    query = {"entity": "Flibbertigibbet syndrome", "aspect": "treatment"}
    notices = httpx.post(server.url + "/search", json=query).json()["notices"]
    assert notices == ["no passage mentions 'Flibbertigibbet syndrome'; showing the closest matches"]
    page.fill("#entity", query["entity"])
    page.fill("#aspect", query["aspect"])
    page.click("#search-button")
    page.wait_for_selector("#results li.result")
    expect(page.locator("#status")).to_contain_text(notices[0])


def test_page_asks_for_a_token_when_reads_need_one(browser, tmp_path, demo_dir):
    index_dir = build_demo_index(demo_dir, tmp_path / "idx")
    with LiveServer(create_app(index_dir, ServiceConfig(tokens=(TOKEN,), auth_reads=True))) as s:
        context = browser.new_context()
        page = context.new_page()
        page.goto(s.url + "/")
        page.wait_for_selector("#token-row:not([hidden])")
        page.fill("#text", "asthma inhaler")
        page.click("#search-button")
        page.wait_for_selector("#status.error")
        assert "missing bearer token" in page.inner_text("#status")
        page.fill("#token", TOKEN)
        page.click("#search-button")
        page.wait_for_selector("#results li.result")
        assert "asthma" in page.locator("#results li.result").first.inner_text().lower()
        context.close()


def test_a_filter_typed_but_not_added_is_applied(page):
    """Field chosen and value typed, then Search (not "Add filter"): the search is filtered, as the form shows it;
    a value with no field chosen is refused, not silently dropped."""
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/search") else None)
    page.fill("#text", "atrial fibrillation")
    page.fill("#filter-value", "treatment")
    page.click("#search-button")
    expect(page.locator("#status.error")).to_contain_text("field")
    assert sent == []
    page.select_option("#filter-field", "aspect")
    page.click("#search-button")
    page.wait_for_selector("#results li.result")
    assert sent[-1]["filters"] == ["aspect=treatment"]
    assert set(page.locator("#results .badge.aspect").all_inner_texts()) == {"treatment"}
    assert page.inner_text("#filters").startswith("aspect = treatment")


def test_page_searches_with_the_cli_default_and_no_filter(browser, tmp_path, demo_dir):
    """An index with vectors and a recorded second stage: the page's retriever menu starts on the default, named for
    this index, and a search from it sends no retriever and no filter — the server then answers as `capr search`."""
    import json
    import subprocess
    import sys

    idx = build_dense_demo_index(demo_dir, tmp_path / "idx", second_stage="bi:minilm")
    question = "which inhaler controls asthma"
    cli = subprocess.run([sys.executable, "-m", "capr", "search", str(idx), question, "--json"], capture_output=True,
                         text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    expected = json.loads(cli.stdout)
    assert (expected["retriever"], expected["reranker"]) == ("hybrid", "bi:minilm")
    with LiveServer(create_app(idx, ServiceConfig())) as s:
        context = browser.new_context()
        page = context.new_page()
        sent: list[dict] = []
        page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/search") else None)
        page.goto(s.url + "/")
        expect(page.locator("#retriever option:checked")).to_have_text("Default — Hybrid (BM25 + dense) + second stage")
        assert page.input_value("#retriever") == ""
        values = page.eval_on_selector_all("#retriever option", "els => els.map(e => e.value)")
        assert values == ["", "bm25", "tfidf", "dense", "hybrid"]  # the others stay choices
        assert page.input_value("#filter-field") == ""  # no filter field chosen for the person
        page.click("#add-filter")
        page.fill("#text", question)
        page.click("#search-button")
        page.wait_for_selector("#results li.result")
        assert "retriever" not in sent[-1] and sent[-1]["filters"] == []
        assert "hybrid, BM25 : dense = 1 : 4 + second stage bi:minilm" in page.inner_text("#status")  # the fusion it used
        shown = page.locator("#results .pid").all_inner_texts()
        assert shown == [h["pid"] for h in expected["results"]]
        # a retriever picked from the menu is sent as picked
        page.select_option("#retriever", "bm25")
        page.click("#search-button")
        expect(page.locator("#status")).to_contain_text("(bm25")
        assert sent[-1]["retriever"] == "bm25"
        context.close()


def test_similar_cases_view_shows_what_the_cli_returns(browser, tmp_path):
    """The page's similar-cases view on a small case index (`capr case-index`): the cases, their diagnoses and the
    highlighted sentences equal `capr cases similar --json`; on a server whose reads need a token, the view shows
    nothing without one."""
    import json
    import subprocess
    import sys

    from case_support import write_tiny_case_data

    data = write_tiny_case_data(tmp_path / "data")
    idx = tmp_path / "idx"

    def capr(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "capr", *args], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    capr("case-index", "--data-dir", str(data), "--out", str(idx), "--source", "codiesp", "--source", "e3c", "--no-dense")
    description = ("A 37-year-old man came with fever and a painful swollen testis. Ultrasound of the epididymis "
                   "showed increased flow.")
    expected_all = json.loads(capr("cases", "similar", description, "--index", str(idx), "-k", "5", "--json"))
    expected, likely = expected_all["cases"], expected_all["diagnoses"]
    assert likely
    assert len(expected) == 5 and expected[0]["labelled"] and any(not c["labelled"] for c in expected)
    with LiveServer(create_app(idx, ServiceConfig(tokens=(TOKEN,), auth_reads=True))) as s:
        context = browser.new_context(viewport={"width": 1200, "height": 1000})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(s.url + "/")
        page.click("#tab-cases")
        expect(page.locator("#cases-view")).to_be_visible()
        expect(page.locator("#search-view")).to_be_hidden()
        page.fill("#case-description", description)
        page.select_option("#case-k", "5")
        page.click("#cases-button")  # no token: the server refuses and the page shows no case
        expect(page.locator("#cases-status.error")).to_contain_text("missing bearer token")
        assert page.locator("#cases li.case").count() == 0 and page.locator("#likely-diagnoses > li").count() == 0
        expect(page.locator("#likely")).to_be_hidden()
        expect(page.locator("#codes")).to_be_hidden()
        page.fill("#token", TOKEN)
        page.click("#cases-button")
        # (the first request loads the ICD-10-CM names: allow it time on a loaded machine)
        expect(page.locator("#cases-status")).not_to_have_text("Searching…", timeout=120_000)
        assert page.locator("#cases-status.error").count() == 0, page.inner_text("#cases-status")
        expect(page.locator("#cases li.case")).to_have_count(5)
        assert "5 similar cases" in page.inner_text("#cases-status") and "(bm25)" in page.inner_text("#cases-status")
        expect(page.locator("#likely")).to_be_visible()
        assert page.locator("#likely-diagnoses > li").evaluate_all("els => els.map(e => e.dataset.code)") == \
            [d["code"] or "" for d in likely]
        assert page.locator("#likely-diagnoses > li .dx-head .name").all_inner_texts() == [d["name"] for d in likely]
        # the coder's list beside it, in the order the CLI's --json gives
        expect(page.locator("#codes")).to_be_visible()
        assert page.locator("#likely-codes > li").evaluate_all("els => els.map(e => e.dataset.code)") == \
            [c["code"] for c in expected_all["codes"]] and expected_all["codes"]
        # each diagnosis with the findings for (+) and against (−) it, and the findings read from the description
        shown_evidence = page.locator("#likely-diagnoses > li").first.locator(".dx-evidence li .finding")
        assert shown_evidence.all_inner_texts() == [e["finding"] for e in likely[0]["supporting"]] + \
            [f"no {e['finding']}" for e in likely[0]["against"]]
        expect(page.locator("#patient-findings")).to_be_visible()
        assert page.locator("#finding-list li").all_inner_texts() == \
            [("no " if f["negated"] else "") + (f"{f['concept']} ({f['text']})" if f["kind"] == "lab" and f["concept"]
                                                  else f["text"]) for f in expected_all["findings"]["findings"]]
        shown = page.locator("#cases li.case")
        assert [shown.nth(i).get_attribute("data-doc-id") for i in range(5)] == [c["doc_id"] for c in expected]
        for i, case in enumerate(expected):
            item = shown.nth(i)
            assert item.locator("h3 a").inner_text() == case["doc_id"]
            dx = item.locator("li.diagnosis")
            assert dx.locator(".name").all_inner_texts() == [d["name"] for d in case["diagnoses"]]
            assert item.locator("li.diagnosis .code").all_inner_texts() == [d["code"] for d in case["diagnoses"] if d["code"]]
            assert set(item.locator("li.diagnosis").evaluate_all("els => els.map(e => e.dataset.kind)")) <= \
                {"label" if case["labelled"] else "mention"}
            pairs = item.locator("li.pair")
            assert pairs.count() == len(case["evidence"])
            for j, e in enumerate(case["evidence"]):
                pair = pairs.nth(j)
                assert pair.locator(".case-sentence").inner_text() == e["sentence"]
                assert pair.locator(".query-sentence .text").inner_text() == e["query_sentence"]
                assert pair.locator(".case-sentence mark.shared").all_inner_texts() == \
                    [e["sentence"][a:b] for a, b in e["highlights"]]
                assert pair.locator(".query-sentence mark.shared").all_inner_texts() == \
                    [e["query_sentence"][a:b] for a, b in e["query_highlights"]]
        top = expected[0]
        assert top["diagnoses"][0]["code"] == "N45.3" and shown.first.locator(".code").first.inner_text() == "N45.3"
        assert "Epididymo-orchitis" in shown.first.locator("li.diagnosis").first.inner_text()
        assert {m.lower() for m in shown.first.locator("mark.shared").all_inner_texts()} >= {"testis", "ultrasound"}
        # the case's link opens the whole case with its best evidence sentence marked
        shown.first.locator("h3 a").click()
        page.wait_for_selector("#document:not([hidden])")
        assert page.inner_text("#doc-passage") == top["evidence"][0]["sentence"]
        context.close()
        assert not errors, errors
        # a host the server was not told to answer gets no patient text
        r = httpx.post(s.url + "/cases/similar", json={"description": description},
                       headers={**AUTH, "Host": "attacker.example"})
        assert r.status_code == 421 and "epididym" not in r.text.lower()


def test_highlights_and_marks_count_characters_beyond_the_bmp_once(page, server):
    """The server's offsets count code points, a JS string UTF-16 units: an emoji or a mathematical letter (𝜇)
    before a highlighted word must not shift the query terms, the evidence, the document's mark or the similar-case
    view's shared words by one character each."""
    text = "PLAN: patient 😀😀 on 𝜇g dosing. Start 💊 quuxomab 40 mg weekly for zorbitis. Recheck in 2 weeks."
    r = httpx.post(server.url + "/documents", json={"doc_id": "browser_astral", "title": "Zorbitis clinic note",
                                                    "text": text}, headers=AUTH)
    assert r.status_code == 201, r.text
    try:
        page.fill("#text", "quuxomab zorbitis")
        page.click("#search-button")
        page.wait_for_selector("#results li.result")
        first = page.locator("#results li.result").first
        assert first.get_attribute("data-doc-id") == "browser_astral"
        assert first.locator("strong.term").all_inner_texts() == ["quuxomab", "zorbitis"]
        assert "Start 💊 quuxomab 40 mg weekly for zorbitis." in "".join(first.locator("mark.evidence").all_inner_texts())
        first.locator("h3 a").click()
        page.wait_for_selector("#document:not([hidden])")
        assert page.inner_text("#doc-passage") == text
        page.click("#close-doc")

        description = "Patient 😀 started quuxomab weekly for zorbitis."
        expected = httpx.post(server.url + "/cases/similar", json={"description": description, "k": 5}, timeout=120).json()
        case = next(c for c in expected["cases"] if c["doc_id"] == "browser_astral")
        page.click("#tab-cases")
        page.fill("#case-description", description)
        page.select_option("#case-k", "5")
        page.click("#cases-button")
        expect(page.locator("#cases-status")).not_to_have_text("Searching…", timeout=120_000)
        pair = page.locator("#cases li.case[data-doc-id='browser_astral'] li.pair").first
        e = case["evidence"][0]
        assert "💊" in e["sentence"] and "😀" in e["query_sentence"]
        assert pair.locator(".case-sentence mark.shared").all_inner_texts() == [e["sentence"][a:b] for a, b in e["highlights"]]
        assert pair.locator(".query-sentence mark.shared").all_inner_texts() == \
            [e["query_sentence"][a:b] for a, b in e["query_highlights"]]
        page.locator("#cases li.case[data-doc-id='browser_astral'] h3 a").click()
        expect(page.locator("#doc-passage")).to_have_text(e["sentence"])
    finally:
        httpx.delete(server.url + "/documents/browser_astral", headers=AUTH)


# three notes of one made-up condition, with an admission time, a grade (a number) and a patient id
DATED_NOTES = [("browser_dated_a", "2149-12-20", 1, "S-1001"), ("browser_dated_b", "2150-01-15T08:30", 2, "S-1002"),
               ("browser_dated_c", "2150-03-02", 3, "S-1003")]


@pytest.fixture
def dated_notes(server):
    for doc_id, admitted, grade, subject in DATED_NOTES:
        doc = {"doc_id": doc_id, "title": f"Quorbitis note {doc_id[-1]}",
               "text": f"Quorbitis treated with blenoxate, case {doc_id[-1]}.",
               "metadata": {"admitted": admitted, "grade": grade, "subject_id": subject}}
        r = httpx.post(server.url + "/documents", json=doc, headers=AUTH)
        assert r.status_code == 201, r.text
    yield [d[0] for d in DATED_NOTES]
    for doc_id, *_ in DATED_NOTES:
        httpx.delete(server.url + "/documents/" + doc_id, headers=AUTH)


def _add_filter(page, text, field=None):
    if field is not None:
        page.select_option("#filter-field", field)
    page.fill("#filter-value", text)
    page.click("#add-filter")


def _chips(page):
    return [t.removesuffix("×").strip() for t in page.locator("#filters li").all_inner_texts()]


def _search_ids(page):
    page.click("#search-button")
    expect(page.locator("#status")).not_to_have_text("Searching…")
    assert page.locator("#status.error").count() == 0, page.inner_text("#status")
    return [i.get_attribute("data-doc-id") for i in page.locator("#results li.result").all()]


def test_range_and_set_filters_are_sent_as_the_cli_takes_them(page, server, dated_notes):
    """A filter typed as `capr search --filter` takes it (admitted>=2150-01-01, grade in (1, 3)) or as an operator and
    bound after the chosen field (<2150-02) narrows the results as the service does for that clause; two bounds on one
    field make a window, and each filter is listed as it was typed."""
    a, b, c = dated_notes
    page.reload()  # the field menu lists the fields the notes above brought
    expect(page.locator("#filter-field option[value='admitted']")).to_have_count(1)
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/search") else None)
    page.fill("#text", "quorbitis blenoxate")
    _add_filter(page, "admitted>=2150-01-01")
    assert _chips(page) == ["admitted>=2150-01-01"]
    assert sorted(_search_ids(page)) == [b, c]
    assert sent[-1]["filters"] == ["admitted>=2150-01-01"]
    _add_filter(page, "<2150-02", field="admitted")
    assert _chips(page) == ["admitted>=2150-01-01", "admitted<2150-02"]
    assert _search_ids(page) == [b]
    assert sent[-1]["filters"] == ["admitted>=2150-01-01", "admitted<2150-02"]
    page.click("#filters li:nth-child(2) button")
    # the chosen field's name typed again: a whole filter, not the value "grade in (1, 3)" of grade
    _add_filter(page, "grade in (1, 3)", field="grade")
    assert _chips(page) == ["admitted>=2150-01-01", "grade in (1, 3)"]
    shown = _search_ids(page)
    assert shown == [c]
    assert sent[-1]["filters"] == ["admitted>=2150-01-01", "grade in (1, 3)"]
    expected = httpx.post(server.url + "/search", json={**sent[-1], "text": "quorbitis blenoxate"}).json()["results"]
    assert shown == [h["doc_id"] for h in expected]


def test_a_refused_filter_shows_the_server_error_and_keeps_the_others(page, dated_notes):
    """An unknown field, a bound of the wrong kind, a date that does not exist: the server's reason is shown as an
    alert, with no results, and every filter stays listed; a patient id with no match names no other patient's id.
    With the refused filter removed, the others still apply."""
    a, b, c = dated_notes
    page.reload()
    expect(page.locator("#filter-field option[value='grade']")).to_have_count(1)
    page.fill("#text", "quorbitis blenoxate")
    _add_filter(page, "admitted>=2150-01-01")
    for bad, reason in [("admittd<2151", "unknown filter field 'admittd'"),
                        ("grade>=II", "grade holds numbers and 'II' is not one"),
                        ("admitted>=2150-13-01", "admitted bound '2150-13-01' is not a valid date"),
                        ("subject_id=S-1009", "no passage has subject_id='S-1009'")]:
        _add_filter(page, bad)
        assert _chips(page) == ["admitted>=2150-01-01", bad]
        page.click("#search-button")
        expect(page.locator("#status.error")).to_contain_text(reason)
        assert page.get_attribute("#status", "role") == "alert"
        assert page.locator("#results li").count() == 0
        assert _chips(page) == ["admitted>=2150-01-01", bad]
        if bad.startswith("subject_id"):
            said = page.inner_text("#status")
            assert "close" not in said and "S-100" not in said.replace("S-1009", "")
        page.click("#filters li:nth-child(2) button")
    assert sorted(_search_ids(page)) == [b, c]
