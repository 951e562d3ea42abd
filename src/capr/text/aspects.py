"""Canonical aspects and the synonym/abbreviation table that maps note headings onto them.

Headings not in the table keep their cleaned, lower-cased text as aspect, so a
user's own section names still work as aspects and filters.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Callable, Iterable, Mapping

from capr.errors import QueryError

# canonical aspect -> synonyms and abbreviations (lower case, no trailing colon)
ASPECT_SYNONYMS: dict[str, list[str]] = {
    # clinical note sections
    "chief complaint": ["cc", "chief complaints", "reason for visit", "reason for consultation",
                        "reason for consult", "presenting complaint"],
    "history of present illness": ["hpi", "history of the present illness", "present illness", "genhx",
                                   "history", "interval history", "subjective", "history of presenting illness", "hx"],
    "past medical history": ["pmh", "pmhx", "past history", "medical history", "pastmedicalhx",
                             "past medical history/problem list", "past medical/surgical history"],
    "past surgical history": ["psh", "pshx", "surgical history", "pastsurgical", "previous surgeries"],
    "family history": ["fh", "fhx", "family hx", "family medical history"],
    "social history": ["sh", "shx", "social hx", "habits", "personal history"],
    "family/social history": ["fam/sochx", "family and social history", "social and family history"],
    "medications": ["meds", "current medications", "medication", "home medications", "medications on admission",
                    "admission medications", "outpatient medications", "current meds"],
    "discharge medications": ["medications on discharge", "discharge meds"],
    "allergies": ["allergy", "all", "drug allergies", "nkda", "allergies to medications"],
    "review of systems": ["ros", "systems review", "review of system"],
    "physical examination": ["pe", "exam", "physical exam", "examination", "objective", "physical findings",
                             "heent", "neck", "lungs", "chest", "heart", "cardiovascular", "abdomen", "extremities",
                             "neurologic", "neurological", "neuro", "skin", "general", "musculoskeletal",
                             "psychiatric", "genitourinary", "lymphatic", "respiratory", "head", "eyes", "ears",
                             "gu", "cn", "cranial nerves", "ms", "mental status", "motor", "sensory", "reflexes",
                             "coordination", "gait", "neurological examination", "neurologic exam", "back", "rectal",
                             "pelvic", "breasts", "lymph nodes", "constitutional", "ent"],
    "vital signs": ["vitals", "vs", "vital sign"],
    "laboratory data": ["labs", "lab", "laboratory", "laboratory studies", "laboratory results",
                        "diagnostic studies", "lab results", "data", "results", "pertinent results"],
    "imaging": ["radiology", "x-ray", "ct", "mri", "imaging studies"],
    "assessment": ["impression", "clinical impression", "assessment/impression", "diagnostic impression",
                   "conclusion", "conclusions", "interpretation"],
    "plan": ["recommendations", "recommendation", "treatment plan", "disposition plan"],
    "assessment and plan": ["a/p", "a&p", "assessment/plan", "impression and plan", "impression/plan"],
    "diagnosis": ["diagnoses", "final diagnosis", "discharge diagnosis", "discharge diagnoses", "admitting diagnosis",
                  "admission diagnosis", "dx"],
    "preoperative diagnosis": ["pre-operative diagnosis", "preop diagnosis", "preoperative diagnoses"],
    "postoperative diagnosis": ["post-operative diagnosis", "postop diagnosis", "postoperative diagnoses"],
    "procedure": ["procedures", "procedure performed", "procedures performed", "operation", "name of procedure",
                  "operation performed", "title of operation", "description of procedure", "details of procedure",
                  "description of operation", "procedure in detail", "operative procedure", "procedure details", "procedure note",
                  "technique", "description"],
    "anesthesia": ["anesthetic", "type of anesthesia"],
    "indications": ["indication", "indications for procedure", "indication for procedure", "indications for operation"],
    "findings": ["operative findings", "finding"],
    "complications": ["complication"],
    "estimated blood loss": ["ebl", "blood loss"],
    "specimen": ["specimens", "specimen removed", "pathology"],
    "problem list": ["problems", "active problems"],
    "hospital course": ["course", "brief hospital course", "course in hospital", "edcourse", "ed course",
                        "emergency department course", "clinical course"],
    "disposition": ["condition on discharge", "discharge condition", "discharge disposition"],
    "discharge instructions": ["instructions", "patient instructions"],
    "follow-up": ["follow up", "followup", "follow-up instructions"],
    "immunizations": ["immunization", "vaccinations", "vaccines"],
    "gynecologic history": ["gynhx", "ob/gyn history", "obstetric history", "gyn history"],
    # health-article aspects (MedQuAD question types and the CDV aspect headings)
    "information": ["overview", "what is", "definition", "summary", "about", "introduction"],
    "symptoms": ["signs and symptoms", "symptoms and presentation", "presentation", "clinical features",
                 "signs", "symptom"],
    "causes": ["cause", "etiology", "aetiology", "causes and risk factors", "why"],
    "treatment": ["treatments", "therapy", "management", "treatment and management", "how is it treated"],
    "prevention": ["prevent", "preventing", "prevention and screening"],
    "exams and tests": ["diagnosis and tests", "tests", "exams", "testing", "diagnostic tests", "screening",
                        "how is it diagnosed", "evaluation"],
    "outlook": ["prognosis", "outlook and prognosis", "expectations", "possible outcomes"],
    "inheritance": ["inherited", "genetics and inheritance", "how is it inherited"],
    "frequency": ["frequency and epidemiology", "epidemiology", "prevalence", "incidence", "how common"],
    "genetic changes": ["genetics", "genes", "genetic causes", "mutations"],
    "research": ["research and clinical trials", "clinical trials", "current research"],
    "susceptibility": ["risk factors", "who is at risk", "risk"],
    "considerations": ["special considerations", "when to contact a medical professional"],
    "stages": ["staging", "stage"],
}

_CLEAN_RE = re.compile(r"^[\s#*\d.)(\-]+|[\s:.\-*#]+$")
_SPACE_RE = re.compile(r"\s+")

_LOOKUP: dict[str, str] = {}
for _canonical, _syns in ASPECT_SYNONYMS.items():
    _LOOKUP[_canonical] = _canonical
    for _s in _syns:
        _LOOKUP.setdefault(_s, _canonical)


# LOINC section codes (C-CDA R2.1 section templates, FHIR Composition.section.code) → canonical aspect.
# A coded section gets its aspect from the code, not from its title: "Meds" and "Current Outpatient
# Prescriptions" are both 10160-0. Codes not listed fall back to the section's title.
LOINC_ASPECTS: dict[str, str] = {
    "10154-3": "chief complaint",            # Chief complaint
    "46239-0": "chief complaint",            # Chief complaint + Reason for visit
    "29299-5": "chief complaint",            # Reason for visit
    "10164-2": "history of present illness",  # History of Present illness
    "61150-9": "history of present illness",  # Subjective
    "11348-0": "past medical history",       # History of Past illness
    "11450-4": "problem list",               # Problem list - Reported
    "47519-4": "procedure",                  # History of Procedures
    "29554-3": "procedure",                  # Procedure Narrative
    "10160-0": "medications",                # History of Medication use
    "42346-7": "medications",                # Medications on admission
    "29549-3": "medications",                # Medication administered
    "10183-2": "discharge medications",      # Hospital discharge medications
    "10157-6": "family history",             # History of family member diseases
    "29762-2": "social history",             # Social history
    "48765-2": "allergies",                  # Allergies and adverse reactions
    "10187-3": "review of systems",          # Review of systems
    "29545-1": "physical examination",       # Physical findings
    "61149-1": "physical examination",       # Objective
    "10184-0": "physical examination",       # Hospital discharge physical findings
    "8716-3": "vital signs",                 # Vital signs
    "30954-2": "laboratory data",            # Relevant diagnostic tests/laboratory data
    "18748-4": "imaging",                    # Diagnostic imaging study
    "51848-0": "assessment",                 # Evaluation note (Assessment)
    "18776-5": "plan",                       # Plan of care note
    "51847-2": "assessment and plan",        # Evaluation + Plan note
    "11535-2": "diagnosis",                  # Hospital discharge Dx
    "46241-6": "diagnosis",                  # Hospital admission diagnosis
    "10219-4": "preoperative diagnosis",     # Surgical operation note preoperative Dx
    "10218-6": "postoperative diagnosis",    # Surgical operation note postoperative Dx
    "59768-2": "indications",                # Procedure indications
    "59776-5": "findings",                   # Procedure findings
    "59775-7": "specimen",                   # Procedure specimens taken
    "55109-3": "complications",              # Complications
    "59770-8": "estimated blood loss",       # Procedure estimated blood loss
    "8648-8": "hospital course",             # Hospital course
    "8653-8": "discharge instructions",      # Hospital discharge instructions
    "11369-6": "immunizations",              # History of Immunization
    "10162-6": "gynecologic history",        # History of pregnancies
}
# How LOINC is named: the C-CDA code system OID and the FHIR system URI.
LOINC_SYSTEMS = {"2.16.840.1.113883.6.1", "http://loinc.org", "urn:oid:2.16.840.1.113883.6.1"}
# LOINC document type codes (FHIR DocumentReference.type and Composition.type, the C-CDA document code) → the
# note type a user filters by, for a coding that gives the code without its display name: the same note is then
# "Discharge summary" whichever resource carries it.
LOINC_DOCUMENT_TYPES: dict[str, str] = {
    "11488-4": "Consult note",
    "18842-5": "Discharge summary",
    "11506-3": "Progress note",
    "34117-2": "History and physical note",
    "11504-8": "Surgical operation note",
    "28570-0": "Procedure note",
    "34111-5": "Emergency department note",
    "18761-7": "Transfer summary note",
    "57133-1": "Referral note",
    "34746-8": "Nurse note",
    "34109-9": "Note",
    "34133-9": "Summary of episode note",
    "60591-5": "Patient summary",
    "18748-4": "Diagnostic imaging study",
    "11502-2": "Laboratory report",
    "11526-1": "Pathology study",
    "18776-5": "Plan of care note",
    "51847-2": "Evaluation and plan note",
}


def loinc_document_type(code: str | None, system: str | None = None) -> str:
    """The name of a LOINC document type code (LOINC_DOCUMENT_TYPES) when the coding is LOINC (or names no system),
    else ""."""
    code = (code or "").strip()
    if system and system.strip() and system.strip() not in LOINC_SYSTEMS:
        return ""
    return LOINC_DOCUMENT_TYPES.get(code, "")


def aspect_for_code(code: str | None, system: str | None = None, fallback_heading: str = "") -> str:
    """Canonical aspect of a coded section: the LOINC table when the code is LOINC (or the system is
    not given) and listed, else the normalized heading (so an unlisted code still gets its title's aspect)."""
    code = (code or "").strip()
    if code and (system is None or system.strip() in LOINC_SYSTEMS or not system.strip()) and code in LOINC_ASPECTS:
        return LOINC_ASPECTS[code]
    return normalize_aspect(fallback_heading) if fallback_heading.strip() else ""


def clean_heading(heading: str) -> str:
    h = _CLEAN_RE.sub("", heading.strip())
    return _SPACE_RE.sub(" ", h).strip().lower()


def normalize_aspect(heading: str) -> str:
    """Canonical aspect for a heading; unknown headings keep their cleaned text."""
    h = clean_heading(heading)
    if h in _LOOKUP:
        return _LOOKUP[h]
    h2 = h.replace("_", " ").replace(" & ", " and ")
    return _LOOKUP.get(h2, h2)


def is_known_heading(heading: str) -> bool:
    return clean_heading(heading) in _LOOKUP


def aspect_terms(aspect: str) -> list[str]:
    """The aspect's canonical name followed by its synonyms (for query expansion)."""
    canonical = normalize_aspect(aspect)
    return [canonical, *ASPECT_SYNONYMS.get(canonical, [])]


def canonical_aspects() -> list[str]:
    return list(ASPECT_SYNONYMS)


# Question wording → the aspect it asks about (first match wins). Measured on the questions of MedQuAD's training
# documents (experiments/infer_aspect_dev.py; docs/RESULTS.md).
_QUESTION_ASPECTS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(p, re.I), a)
    for p, a in [
        (r"\b(symptoms?|signs?|presentation|present with|feel like)\b", "symptoms"),
        (r"\b(treat(ed|ment|ments|ing)?|therap(y|ies)|manage(d|ment)?|cure[ds]?|medications? for)\b", "treatment"),
        (r"\b(diagnos(e|ed|is|tic)|tests?|exams?|screen(ing|ed)?)\b", "exams and tests"),
        (r"\b(caus(e|es|ed)|why does|risk factors?)\b", "causes"),
        (r"\b(inherit(ed|ance)?|hereditary|passed down)\b", "inheritance"),
        (r"\b(genes?|genetic|mutations?)\b", "genetic changes"),
        (r"\b(how many|how common|prevalence|incidence|frequency)\b", "frequency"),
        (r"\b(prevent(ed|ion)?|avoid)\b", "prevention"),
        (r"\b(outlook|prognosis|life expectancy|survival)\b", "outlook"),
        (r"\b(complications?)\b", "complications"),
        (r"\bfamily history\b", "family history"),
        (r"\b(research|clinical trials?)\b", "research"),
        (r"\b(who is at risk|at risk|susceptib\w*)\b", "susceptibility"),
        (r"\b(stages of|staging|staged|what stage)\b", "stages"),
        (r"\b(what to do|special considerations)\b", "considerations"),
        # last: "what is the outlook for X" asks about the outlook
        (r"^\W*(what (is|are)( \(are\))?|do you have (any )?information (about|on)|tell me about)\b", "information"),
    ]
]
# Aspects that generic wording ("what is X?") infers. Alone it cost 3.5 P@1 on whole documents whose few stray
# "information" headings it favoured (docs/RESULTS.md, experiments/question_aspect_variants.py), so the search favours such
# an inferred aspect only where the corpus has it as a convention: a section of at least a quarter of its documents.
GENERIC_ASPECTS = frozenset({"information"})
GENERIC_ASPECT_MIN_DOCUMENT_SHARE = 0.25


_ARTICLE_FILLER = frozenset({"a", "an", "the", "of", "for", "with", "and", "in", "on", "to", "about", "your", "my",
                             "its", "it"})
_QUESTION_HEADING_RE = re.compile(r"^(what|how|why|when|who|which|can|could|is|are|do|does|should|will)\b", re.I)


def article_heading_aspect(heading: str, title: str = "") -> str:
    """The aspect of a health article's heading, which often names the article's subject: "Symptoms of gout" and
    "Treating gout" (in an article titled "Gout") are its symptoms and treatment, "How is gout diagnosed?" its exams
    and tests. A heading the table knows is read as :func:`normalize_aspect` reads it; else the heading without the
    title's words (and small words), if the table knows that or the wording of its few remaining words says it; else
    a question's wording (:func:`infer_aspect`); else the heading as normalize_aspect keeps it."""
    aspect = normalize_aspect(heading)
    if aspect in ASPECT_SYNONYMS:
        return aspect
    cleaned = clean_heading(heading.rstrip("?"))
    named = set(clean_heading(title).split()) if title else set()
    rest = [w for w in cleaned.split() if w not in named and w not in _ARTICLE_FILLER]
    if named and rest and len(rest) < len(cleaned.split()):
        short = " ".join(rest)
        if short in _LOOKUP:
            return _LOOKUP[short]
        if len(rest) <= 2 and (inferred := infer_aspect(short)) and inferred not in GENERIC_ASPECTS:
            return inferred
    if heading.strip().endswith("?") or _QUESTION_HEADING_RE.match(cleaned):
        if (inferred := infer_aspect(heading)) is not None:
            return inferred
    return aspect


def infer_aspect(question: str) -> str | None:
    """The aspect a free-text question asks about, if its wording says so."""
    for pattern, aspect in _QUESTION_ASPECTS:
        if pattern.search(question):
            return aspect
    return None


# Corpus aspects are cleaned note headings; many are one-off fragments ("a 21-day-old with", "a-1 womac
# score"). Only frequent ones that look like a heading are suggested to a user who mistyped an aspect.
MIN_SUGGESTED_ASPECT_PASSAGES = 5  # ... and at least 1 in 2,000 live passages
_HEADING_LIKE_RE = re.compile(r"^[a-z][a-z&/()' \-]{2,39}$")


def _heading_like(aspect: str) -> bool:
    words = aspect.split()
    return bool(_HEADING_LIKE_RE.match(aspect)) and len(words) <= 5 and len(words[0]) > 1


# A typo rarely changes a word's first letter; difflib alone finds "stage" close to "dosage" (ratio 0.73), which
# is no help. A match starting with another letter is shown only when it is this close.
_TYPO_OTHER_START_MIN = 0.8


def _plausible_typo(wanted: str, match: str) -> bool:
    return wanted[:1] == match[:1] or difflib.SequenceMatcher(None, wanted, match).ratio() >= _TYPO_OTHER_START_MIN


def aspect_suggestions(aspect: str, corpus_aspects: Mapping[str, int] | Iterable[str], n: int = 5) -> tuple[list[str], bool]:
    """(suggestions, close): close matches among the canonical aspects and their synonyms (shown by their
    canonical name) first, then among frequent heading-like corpus aspects; without any close match, the
    aspects a user most likely wants: canonical ones by corpus frequency, then frequent corpus headings.
    ``corpus_aspects`` maps aspect → live passages (a plain list: frequency unknown, every one counts)."""
    counts = dict(corpus_aspects) if isinstance(corpus_aspects, Mapping) else {a: None for a in corpus_aspects}
    total = sum(c for c in counts.values() if c) or 0
    floor = max(MIN_SUGGESTED_ASPECT_PASSAGES, total // 2000)
    frequent = {a: c or 0 for a, c in counts.items() if a and _heading_like(a) and (c is None or c >= floor)}
    canonical = {a: a for a in ASPECT_SYNONYMS} | {s: a for a, syns in ASPECT_SYNONYMS.items() for s in syns}
    wanted = aspect.strip().lower()
    out: list[str] = []
    seen: set[str] = set()
    for pool in (canonical, {a: a for a in frequent}):
        # the matched name is shown (synonyms are valid aspects too), one per canonical aspect
        for m in difflib.get_close_matches(wanted, sorted(pool), n=n, cutoff=0.6):
            if not _plausible_typo(wanted, m):
                continue
            if pool[m] not in seen:
                seen.add(pool[m])
                out.append(m)
    if out:
        return out[:n], True
    by_freq = sorted(ASPECT_SYNONYMS, key=lambda a: (-(counts.get(a) or 0), list(ASPECT_SYNONYMS).index(a)))
    present = [a for a in by_freq if counts.get(a)] or by_freq
    others = sorted((a for a in frequent if a not in ASPECT_SYNONYMS), key=lambda a: (-frequent[a], a))
    return (present[:10] + others)[:15], False


# An aspect the corpus has no section for is read as the corpus aspect whose phrasings share the most analysed
# words with it ("genetic inheritance" → inheritance, "diagnosis" on health articles → exams and tests), when the
# overlap is at least this Jaccard similarity and no other aspect ties it. Chosen on the synonym table itself
# (every multi-word synonym held out in turn: experiments/aspect_resolution_dev.py, docs/RESULTS.md).
ASPECT_MATCH_MIN = 0.5


def _phrasings(aspect: str) -> list[str]:
    canonical = normalize_aspect(aspect)
    return list(dict.fromkeys([aspect.strip().lower(), canonical, *ASPECT_SYNONYMS.get(canonical, [])]))


def nearest_aspect(aspect: str, corpus_aspects: Mapping[str, int | None] | Iterable[str],
                   analyzer: Callable[[str], list[str]], min_similarity: float = ASPECT_MATCH_MIN) -> str | None:
    """The corpus aspect that ``aspect`` means: itself (canonical form) when the corpus has it; else the frequent
    corpus aspect whose name or synonyms share the most analysed words with the aspect's own phrasings (Jaccard of
    the word sets, best pair); None when nothing reaches ``min_similarity`` or two aspects tie for it."""
    counts = dict(corpus_aspects) if isinstance(corpus_aspects, Mapping) else {a: None for a in corpus_aspects}
    canonical = normalize_aspect(aspect)
    if canonical in counts or aspect.strip().lower() in counts:
        return canonical if canonical in counts else aspect.strip().lower()
    total = sum(c for c in counts.values() if c) or 0
    floor = max(MIN_SUGGESTED_ASPECT_PASSAGES, total // 2000)
    wanted = [set(analyzer(p)) for p in _phrasings(aspect)]
    wanted = [w for w in wanted if w]
    if not wanted:
        return None
    scored: list[tuple[float, str]] = []
    for cand, n in counts.items():
        if not cand or not _heading_like(cand) or (n is not None and n < floor):
            continue
        best = 0.0
        for phrase in _phrasings(cand):
            have = set(analyzer(phrase))
            for w in wanted:
                if have & w:
                    best = max(best, len(have & w) / len(have | w))
        if best >= min_similarity:
            scored.append((round(best, 6), cand))
    scored.sort(reverse=True)
    if not scored or (len(scored) > 1 and scored[1][0] == scored[0][0]):
        return None
    return scored[0][1]


def filter_aspect(value: object, corpus_aspects: Mapping[str, int | None] | Iterable[str],
                  analyzer: Callable[[str], list[str]] | None = None) -> str:
    """The corpus aspect an ``aspect`` filter value selects, read as ``-a`` reads an aspect: its canonical
    name ("meds" → medications) when the corpus has it, else the corpus aspect it reads as
    (:func:`nearest_aspect`: "medication list" → medications), else its canonical name (which no passage has)."""
    canonical = normalize_aspect(str(value))
    if analyzer is None:
        return canonical
    return nearest_aspect(str(value), corpus_aspects, analyzer) or canonical


def no_aspect_message(value: object, shown: str, corpus_aspects: Mapping[str, int | None] | Iterable[str],
                      n: int = 8) -> str:
    """The error for an aspect filter no passage passes: the index's aspects close to ``value`` (a typo), else
    the aspects it has, most frequent first."""
    counts = dict(corpus_aspects) if isinstance(corpus_aspects, Mapping) else {a: None for a in corpus_aspects}
    close = difflib.get_close_matches(str(value), list(counts), n=5, cutoff=0.6)
    if close:
        return f"no passage has {shown} (close: {', '.join(close)})"
    names = sorted(counts, key=lambda a: -(counts[a] or 0))
    more = f" and {len(names) - n} more" if len(names) > n else ""
    return f"no passage has {shown}; this index's aspects: {', '.join(names[:n])}{more}"


KnownTerms = Callable[[list[str]], Iterable[str]]  # the given analysed terms that occur in an index


def searchable_as_words(aspect: str, analyzer: Callable[[str], list[str]], known_terms: KnownTerms) -> bool:
    """Whether every analysed word of ``aspect`` occurs in the index: it can then be searched as words. A table
    aspect that the corpus has no section for ("stages" on clinical notes) has always been searched that way (its
    words, no section prior); an aspect outside the table ("side effects") whose words the index has is no
    different. A word the index lacks ("zzqqxx", "symptons", "wund care") is most likely a typo: refused."""
    words = list(dict.fromkeys(analyzer(aspect)))
    return bool(words) and set(known_terms(words)) >= set(words)


def check_aspect(aspect: str, corpus_aspects: Mapping[str, int] | Iterable[str] | Callable[[], Any],
                 analyzer: Callable[[str], list[str]] | None = None, known_terms: KnownTerms | None = None) -> None:
    """An aspect is known when the synonym table or the corpus has it, or (given the corpus' ``analyzer``) it
    reads as one of the corpus' aspects (:func:`nearest_aspect`), or (given also ``known_terms``) every word of it
    occurs in the index (:func:`searchable_as_words`); otherwise a QueryError with close matches (shared by every
    index backend). ``corpus_aspects``: aspect → live passages, or a list of aspects, or a function giving either,
    called only when the synonym table does not know the aspect (counting a large index's aspects takes a pass
    over its rows)."""
    tabled = set(ASPECT_SYNONYMS) | {s for v in ASPECT_SYNONYMS.values() for s in v}
    if aspect.strip().lower() in tabled or normalize_aspect(aspect) in tabled:
        return
    if callable(corpus_aspects):
        corpus_aspects = corpus_aspects()
    corpus = set(corpus_aspects)
    if aspect.strip().lower() in corpus or normalize_aspect(aspect) in corpus:
        return
    if analyzer is not None and nearest_aspect(aspect, corpus_aspects, analyzer) is not None:
        return
    if analyzer is not None and known_terms is not None and searchable_as_words(aspect, analyzer, known_terms):
        return
    suggestions, close = aspect_suggestions(aspect, corpus_aspects)
    hint = f"; did you mean {', '.join(suggestions)}?" if close else f"; known aspects include: {', '.join(suggestions)}"
    raise QueryError(f"unknown aspect {aspect!r}{hint}")
