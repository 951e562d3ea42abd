"""The differential diagnosis (issue 54): findings read from a description, disease profiles from an index's
headings and titles, the ranking with the findings for and against each diagnosis, and the answer matching of the
vignette benchmark."""

from __future__ import annotations

import json

import numpy as np
import pytest

from capr.cases.findings import extract_findings
from capr.cases.labs import read_measurements
from capr.records import Document, Section

from conftest import capr_in_process, need_data


# ------------------------------------------------------------------------------------------ findings
def test_findings_are_affirmed_or_denied_with_age_and_sex_as_context():
    text = ("A 58-year-old woman comes to the emergency department because of chest pain and a dry cough. She denies "
            "fever, palpitations or syncope. Anti-dsDNA negative. Which of the following is the most likely diagnosis?")
    f = extract_findings(text)
    assert (f.context.age, f.context.sex) == (58.0, "female")
    assert f.question == "Which of the following is the most likely diagnosis?"
    assert "most likely" not in f.patient_text and f.patient_text.startswith("A 58-year-old woman")
    state = {x.text: x.negated for x in f.findings}
    assert state["chest pain"] is False and state["dry cough"] is False
    assert state["fever"] is True and state["palpitations"] is True and state["syncope"] is True
    assert state["Anti-dsDNA"] is True
    # age and sex are context, never findings; every finding's offsets are its words in the description
    assert not any("year-old" in x.text or x.text.lower() in ("woman", "she") for x in f.findings)
    assert all(text[x.start:x.end] == x.text for x in f.findings)


def test_measurements_become_the_abnormality_they_show():
    f = extract_findings("Temperature 39.4°C (103°F), pulse 118/min, blood pressure 118/76 mm Hg. Serum calcium is "
                         "12.9 mg/dL, sodium 139 mEq/L, glucose 450 mg/dL and pH 7.1. Platelet count 95,000/mm3.")
    labs = {x.concept for x in f.findings if x.kind == "lab"}
    assert labs == {"fever", "tachycardia", "hypercalcemia", "hyperglycemia", "acidosis", "thrombocytopenia"}
    assert not any("sodium" in x.text.lower() or "blood pressure" in x.text.lower() for x in f.findings)
    hyper = next(x for x in f.findings if x.concept == "hypercalcemia")
    assert hyper.label == "hypercalcemia (calcium is 12.9)" and "high calcium" in hyper.names
    # Fahrenheit and thousands: read in their units
    assert [m.abnormality for m in read_measurements("Temperature: 100.8 F. Leukocyte count 3.1")] == ["fever", "leukopenia"]


def test_british_spellings_and_synonyms_name_a_finding(tmp_path):
    from capr.cases.findings import FindingNames

    f = extract_findings("A smoker with haemoptysis and joint pain.", FindingNames())
    names = {x.text: x.names for x in f.findings}
    assert names["haemoptysis"][0] == "hemoptysis"
    assert "arthralgia" in names["joint pain"]


# ------------------------------------------------------------------------------------------ answers
def test_answer_matching_by_name_alias_qualifier_and_code():
    from capr.cases.diagnosis_eval import AnswerMatcher

    m = AnswerMatcher()
    assert m.same("Crohn's disease", "Crohn disease")
    assert m.same("Primary Sjogren’s syndrome", "Sjögren syndrome")
    assert m.same("Volvulus", "Volvulus of intestine", "K56.2")  # the same ICD-10-CM code
    assert m.same("Acute pericarditis", "pericarditis")
    assert not m.same("Placenta previa", "Placenta accreta")
    assert not m.same("Chronic myeloid leukemia", "Chronic lymphocytic leukemia")
    assert m.rank_of("Rubella", [("Measles", "B05"), ("Rubella", "B06"), ("Roseola", None)]) == 2
    assert m.rank_of("Rubella", [("Measles", "B05")]) is None
    assert m.mappable("Brucellosis") and not m.mappable("Zzyzx quux")


def test_the_diagnosis_vignettes_of_medqa_dev():
    from capr.cases.data import read_medqa
    from capr.cases.diagnosis_eval import diagnosis_vignettes, is_diagnosis_question

    need_data("medqa_usmle")
    qs = diagnosis_vignettes(read_medqa(need_data()))
    assert len(qs) == 98
    assert all(not is_diagnosis_question(q.description) and "most likely diagnosis" not in q.description for q in qs)
    assert not is_diagnosis_question("Which of the following is the most appropriate next step in diagnosis?")


# ------------------------------------------------------------------------------------------ profiles and ranking
def _article(doc_id: str, title: str, sections: list[tuple[str, str, str]], **meta) -> Document:
    """A health article: (heading, aspect, text) sections, as MedQuAD's pages or a user's articles are read."""
    text, secs = "", []
    for heading, aspect, body in sections:
        if text:
            text += "\n\n"
        secs.append(Section(heading, aspect, len(text), len(text) + len(body)))
        text += body
    return Document(doc_id, title, text, dict(meta), secs)


ARTICLES = [
    _article("brucellosis", "Brucellosis", [
        ("What are the symptoms of Brucellosis?", "symptoms", "Brucellosis causes a fever that comes and goes, "
         "night sweats and joint pain. In men it may cause a swollen testicle (orchitis)."),
        ("What causes Brucellosis?", "causes", "People catch it from unpasteurized milk or fresh cheese of infected "
         "goats and sheep."),
        ("What are the treatments for Brucellosis?", "treatment", "Doxycycline with rifampin for six weeks.")]),
    _article("mumps", "Mumps", [
        ("Symptoms", "symptoms", "Mumps causes fever, headache and swollen salivary glands below the ears. Some men "
         "get a swollen testicle."),
        ("Causes", "causes", "A virus spread by saliva.")]),
    _article("gout", "Gout", [
        ("Signs and symptoms", "symptoms", "Sudden severe joint pain, most often in the big toe, with redness and "
         "warmth of the joint.")]),
    _article("fever", "Fever", [("Symptoms", "symptoms", "A fever is a body temperature above 38 C; chills and "
                                 "sweats come with it.")]),
    Document("typhoid", "Bacterial Infections of the Gastrointestinal Tract — Typhoid Fever",
             "Typhoid fever causes a high fever, abdominal pain, constipation and rose spots on the trunk."),
    Document("intro", "Introduction", "This chapter covers the properties of light and microscopes."),
    Document("lyme-note", "Tick bites", "Lyme disease follows a tick bite: a spreading rash, fever and later joint "
             "pain and swelling of the knee."),
]
BRUCELLOSIS = "37-year-old man, fever, joint pain, swollen testicle after fresh cheese. He denies a rash."


@pytest.fixture(scope="module")
def article_index(tmp_path_factory):
    import capr

    return capr.build_index(ARTICLES, tmp_path_factory.mktemp("dx") / "idx")


def test_profiles_come_from_headings_and_titles(article_index):
    from capr.cases.profiles import ProfileTable

    table = ProfileTable.from_index(article_index, article_index.live.copy())
    by_name = {e.name: (e, table.entity_rows(i)) for i, e in enumerate(table.entities)}
    assert set(by_name) == {"Brucellosis", "Mumps", "Gout", "Fever", "Typhoid Fever"}  # not "Introduction", "Tick bites"
    bru, rows = by_name["Brucellosis"]
    aspects = {article_index.passage(int(r)).aspect for r in rows}
    assert aspects == {"symptoms", "causes"}  # the treatment section describes no patient
    assert bru.code == "A23" and by_name["Typhoid Fever"][0].code.startswith("A01")
    assert by_name["Fever"][0].is_finding and not bru.is_finding
    assert table.find("brucellosis") == table.find("BRUCELLOSIS") is not None


def test_the_differential_ranks_diagnoses_with_findings_for_and_against(article_index):
    from capr.cases.similar import CaseFinder

    finder = CaseFinder(article_index)
    res = finder.similar(BRUCELLOSIS, k=3, diagnoses=6)
    dx = res.diagnoses
    assert dx[0].name == "Brucellosis" and dx[0].code == "A23" and dx[0].kind == "diagnosis"
    support = {e.finding: e for e in dx[0].supporting}
    assert {"swollen testicle", "fresh cheese"} <= set(support)
    assert "fresh cheese" in support["fresh cheese"].sentence and support["fresh cheese"].doc_id == "brucellosis"
    # a symptom's own article is a finding, listed after every diagnosis put forward
    kinds = [d.kind for d in dx]
    assert "finding" not in kinds or kinds.index("finding") > max(i for i, k in enumerate(kinds) if k == "diagnosis")
    # a denied finding a profile names argues against it
    lyme = next((d for d in dx if d.name.lower().startswith("lyme")), None)
    assert lyme is None or lyme.rank > 1
    denied = finder.similar("A man with fever and a swollen testicle. No swollen salivary glands.", k=1, diagnoses=6)
    mumps = next(d for d in denied.diagnoses if d.name == "Mumps")
    assert [e.finding for e in mumps.against] == ["swollen salivary glands"] and mumps.against[0].negated
    assert denied.diagnoses[0].name == "Brucellosis"
    assert res.findings is not None and [f.negated for f in res.findings.findings if f.text == "rash"] == [True]


def test_options_are_scored_by_their_profiles(article_index):
    from capr.cases.similar import CaseFinder

    finder = CaseFinder(article_index)
    scores = finder.option_scores(BRUCELLOSIS, ["Gout", "Brucellosis", "Mumps", "Lyme disease"])
    assert int(np.argmax(scores)) == 1
    # Lyme disease has no profile: scored on the passage naming it, whose rash the patient denies
    assert scores[3] < 0


def test_cli_and_json_list_the_differential(article_index, runner):
    proc = capr_in_process(runner, "cases", "similar", BRUCELLOSIS, "--index", str(article_index.root), "--json")
    data = json.loads(proc.stdout)
    first = data["diagnoses"][0]
    assert first["name"] == "Brucellosis" and first["code"] == "A23" and first["supporting"]
    assert {"finding", "sentence", "doc_id", "negated"} <= set(first["supporting"][0])
    assert any(f["text"] == "rash" and f["negated"] for f in data["findings"]["findings"])
    text = capr_in_process(runner, "cases", "similar", BRUCELLOSIS, "--index", str(article_index.root)).stdout
    assert "differential diagnosis" in text and "1. A23 Brucellosis" in text and "fresh cheese" in text


def test_with_vectors_the_profiles_are_also_matched_by_meaning(tmp_path):
    """An index with vectors (`capr case-index` without --no-dense): the description's cosine with the profile
    passages is one more ranking; words the profiles never use ("testicle" for "orchitis") still find them."""
    import capr
    from capr.cases.similar import CaseFinder
    from capr.models import EncoderConfig

    finder = CaseFinder(capr.build_index(ARTICLES, tmp_path / "dense", dense=EncoderConfig()))
    res = finder.similar(BRUCELLOSIS, k=2, diagnoses=5)
    assert res.retriever == "hybrid"
    first = res.diagnoses[0]
    assert first.name == "Brucellosis" and "dense" in first.sources and "profile" in first.sources
    ranked = finder.differential().dense_ranking("a painful swollen scrotum after unpasteurised goat milk")
    names = [finder.differential().table.entities[int(i[1:])].name for i in ranked[:2]]
    assert "Brucellosis" in names


def test_capr_cases_scores_options_by_their_profiles(article_index, runner):
    from capr.cases import CasePipeline
    from capr.cases.config import CaseConfig, CaseScorer

    pipe = CasePipeline(article_index, CaseConfig(scorer=CaseScorer.profile))
    res = pipe.rank(BRUCELLOSIS, ["Gout", "Brucellosis", "Mumps"])
    assert res.answer.hypothesis == "Brucellosis" and res.scorer == "profile"
    proc = capr_in_process(runner, "cases", "--index", str(article_index.root), "-d", BRUCELLOSIS, "--options",
                           "Gout", "Brucellosis", "Mumps", "--scorer", "profile", "--json")
    assert json.loads(proc.stdout)["answer"] == "Brucellosis"


# ------------------------------------------------------------------------------------------ lay words
def test_lay_words_stand_for_the_clinical_terms_profiles_use():
    from capr.cases.lay_terms import clinical_terms

    assert {"orchitis", "epididymitis", "testicular swelling"} <= set(clinical_terms("swollen testicle"))
    assert "arthralgia" in clinical_terms("joint pain") and "arthritis" in clinical_terms("swollen knees")
    assert "unpasteurized dairy products" in clinical_terms("fresh cheese")
    assert "syncope" in clinical_terms("passed out twice") and "hematuria" in clinical_terms("blood in the urine")
    # what a word denies or does not say is no finding: not "abdominal pain" for a non-tender abdomen, nor dairy for
    # breast milk, nor poultry for chicken pox, nor an inflammation for a mass
    assert clinical_terms("non-tender abdomen") == [] and clinical_terms("no swelling of the knee") == []
    assert clinical_terms("breast milk") == [] and clinical_terms("chicken pox") == []
    assert clinical_terms("milk-alkali syndrome") == [] and clinical_terms("milk of magnesia") == []
    assert "orchitis" not in clinical_terms("testicular mass")
    assert "lymphadenopathy" not in clinical_terms("swollen salivary glands")
    assert clinical_terms("dry cough") == []


def test_lay_words_find_a_profile_written_in_clinical_terms(tmp_path):
    """The README's example against profiles that, like a textbook's, never say "swollen testicle" nor "fresh
    cheese": brucellosis comes first, with the orchitis and the unpasteurized dairy products its profile names."""
    import capr
    from capr.cases.findings import FindingNames
    from capr.cases.similar import CaseFinder

    textbook = [
        Document("bru", "Bacterial Zoonoses — Brucellosis", "Brucellosis is an undulant fever. Human infections are "
                 "primarily associated with the ingestion of unpasteurized dairy products from infected goats. "
                 "Complications include arthralgia, sacroiliitis and epididymo-orchitis."),
        Document("mumps", "Viral Infections — Mumps", "Mumps causes fever and parotitis; orchitis follows in "
                 "adolescent boys."),
        Document("lac", "Digestive Disorders — Lactose Intolerance", "Bloating and diarrhea after milk, cheese and "
                 "other dairy products."),
        Document("gout", "Joint Disorders — Gout", "Gout causes sudden arthralgia and swelling of the big toe."),
    ]
    idx = capr.build_index(textbook, tmp_path / "idx")
    names = {f.text: f.names for f in extract_findings(BRUCELLOSIS, FindingNames()).findings}
    assert "orchitis" in names["swollen testicle"] and "unpasteurized dairy products" in names["fresh cheese"]
    assert [d.name for d in CaseFinder(idx).similar(BRUCELLOSIS, k=1, diagnoses=4).diagnoses][:1] == ["Brucellosis"]
    res = CaseFinder(idx).similar("A 37-year-old man with a swollen testicle after fresh cheese.", k=1, diagnoses=4)
    first = res.diagnoses[0]
    assert first.name == "Brucellosis" and first.code == "A23"
    support = {e.finding: e.sentence for e in first.supporting}
    assert "orchitis" in support["swollen testicle"] and "unpasteurized dairy products" in support["fresh cheese"]
    # another name with a word this corpus never uses matches nothing: "scrotal swelling" is not Gout's "swelling"
    pm = CaseFinder(idx).differential().match(res.findings.findings)
    gout = CaseFinder(idx).differential().find("gout")
    assert pm.shares[[f.text for f in res.findings.findings].index("swollen testicle"), gout] == 0


def test_a_subtype_is_listed_under_its_condition(tmp_path):
    """GARD lists "Thrombotic thrombocytopenic purpura, congenital" beside the condition: a differential names the
    condition once, at the better place of the two, with the sources of both."""
    import capr
    from capr.cases.similar import CaseFinder

    idx = capr.build_index([
        _article("ttp", "Thrombotic thrombocytopenic purpura", [
            ("What are the symptoms?", "symptoms", "Petechiae, fever and confusion with low platelets.")]),
        _article("ttp-c", "Thrombotic thrombocytopenic purpura, congenital", [
            ("What are the symptoms?", "symptoms", "Schistocytes, petechiae and low platelets from birth.")]),
        _article("itp", "Immune thrombocytopenia", [("Symptoms", "symptoms", "Petechiae and bruising.")]),
    ], tmp_path / "idx")
    res = CaseFinder(idx).similar("Petechiae, schistocytes and low platelets.", k=1, diagnoses=5)
    names = [d.name for d in res.diagnoses]
    assert names[0] == "Thrombotic thrombocytopenic purpura" and "Thrombotic thrombocytopenic purpura, congenital" \
        not in names and "Immune thrombocytopenia" in names
    assert "profile" in res.diagnoses[0].sources and res.diagnoses[0].supporting
