"""The findings of a patient description: what the patient has (symptoms, signs, abnormal labs and vitals, history,
exposures), each affirmed or denied, with age and sex kept apart as context.

A description is cut into sentences and each sentence into clauses (at commas, semicolons, "and", "with", "but",
"shows", …); a clause that still holds a clinical word after its filler ("presents", "physical examination", "a
2-week history of") is dropped is a finding. Whether it is denied is ConText's (capr.text.negation) reading of its
sentence ("denies chest pain, palpitations or syncope" denies all three; "Anti-dsDNA negative" denies anti-dsDNA).
A measurement ("calcium 11.8 mg/dL", "pulse 112/min", "temperature 39.4°C") is read against a reference range and
becomes the abnormality it shows ("hypercalcemia", "tachycardia", "fever"); a normal one is no finding. A final
exam question ("Which of the following is the most likely diagnosis?") is not part of the patient and is left out.

Each finding carries the names it may be written as: its own words, the clinical terms its lay words stand for
("swollen testicle" → orchitis, "fresh cheese" → unpasteurized dairy products: capr.cases.lay_terms), the HPO synonyms
of the phenotype it names ("joint pain" → arthralgia), British spellings in American form ("hypercalcaemia" →
hypercalcemia)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from capr.text.negation import negations

_SENTENCE_RE = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][”\"')\]]))\s+(?=[A-Z0-9(\"'“])|\n+")
# a clause ends at punctuation, a conjunction, or a verb that introduces what an examination or a test showed
# a clause ends at punctuation, a conjunction, a relative pronoun, a preposition that starts a new circumstance, or a
# verb that introduces what an examination or a test showed ("pain in the lower abdomen" stays one clause: "in" is
# not a boundary)
_CLAUSE_RE = re.compile(r"\s*[,;:()\[\]]\s*|\s+(?:and|or|with|but|while|whereas|as well as|after|following|before|"
                        r"for|because(?: of)?|due to|by|since|until|who|which|that|when|where|whose|although|though|"
                        r"shows?|showed|shown|reveals?|revealed|demonstrates?|demonstrated|notable for|significant for|"
                        r"remarkable for|consistent with|accompanied by|associated with|followed by|complains? of|"
                        r"reports?|reported|describes?|described|presents?|presented|has|had|have|is|are|was|were)\s+",
                        re.IGNORECASE)
_QUESTION_RE = re.compile(r"^\s*(?:which|what|how|who|where|when|why)\b[^?]*\?\s*$", re.IGNORECASE | re.DOTALL)
_AGE_RE = re.compile(r"\b(\d{1,3}(?:\.\d)?)[- ](year|yr|month|week|day)s?[- ]old\b", re.IGNORECASE)
_AGE_WORDS = {"newborn": 0.0, "neonate": 0.0, "infant": 0.5, "toddler": 2.0}
_FEMALE = frozenset("woman women female girl lady mother she her pregnant".split())
_MALE = frozenset("man men male boy gentleman father he his".split())
# words that carry no finding of their own: who speaks, where, when, the verbs of presenting and examining
_FILLER = frozenset("""
a an the this that these those his her he she him they them their its it is are was were be been being has have had
having does did do of in on at to for from by as into onto over after before since during within about than then
there here who whom which what when where patient patients man woman boy girl male female child infant baby son
daughter mother father husband wife year years old month months week weeks day days hour hours minute minutes
presents presented presenting present comes came brought brings seen visit visits department emergency office clinic
physician doctor hospital admitted evaluation evaluated complains complaining complaint reports reported reporting
states stated says notes noted describes described history examination exam physical shows show showed reveals
reveal revealed finds found findings also now currently recently today yesterday ago past previous previously last
prior several few many some any all both each other new recent since further additional mild moderate severe
significant marked markedly slightly slight increased decreased bilateral right left normal otherwise
unremarkable within limits following follow laboratory studies study results test tests value values level levels
is shown below vital signs sign his/her mr mrs ms dr s t and or but with without because due brought taken appears
appear looks seems well remainder rest abnormalities abnormality unknown one two three four five six seven eight nine
ten once twice times time episode episodes started begun began beginning onset developed develop has been
no not denies denied deny denying without negative absent absence free never none
mm hg min mg dl ml meq mmol iu kg lb bpm breaths beats per cm labs ft lbs
performed diagnosed testing tested symptoms symptom family serum noticed feels felt next subsequently possible
sometimes usually initially become became able unable out sent lab asking asks
""".split())
# exposures: what a patient ate, drank, met or travelled to
_EXPOSURE_RE = re.compile(r"\b(ate|eat|eating|eaten|drank|drink|drinking|consum\w+|travel\w*|trip|returned|camping|"
                          r"hik\w+|farm\w*|exposure|exposed|contact|bitten|bite|raw|unpasteuri[sz]ed|undercooked|"
                          r"works? (?:as|at|in)|occupation|animals?|pets?|goats?|sheep|cattle|dogs?|cats?|birds?|"
                          r"cheese|milk|dairy|meat|pork|seafood|shellfish|fish|eggs?|poultry|mushrooms?)\b",
                          re.IGNORECASE)
_HISTORY_RE = re.compile(r"\b(history of|previous|prior|past|known|diagnosed with|treated for|takes|taking|medications?)\b",
                         re.IGNORECASE)
_DURATION_RE = re.compile(r"\b(?:\d+|one|two|three|four|five|six|several|few)[- ](?:hour|day|week|month|year)s?[- ]"
                          r"history\b", re.IGNORECASE)
_BRITISH = ((re.compile(r"aemia\b"), "emia"), (re.compile(r"\bhaem"), "hem"), (re.compile(r"oedema\b"), "edema"),
            (re.compile(r"\boesophag"), "esophag"), (re.compile(r"\bpaediatr"), "pediatr"), (re.compile(r"tumour"), "tumor"),
            (re.compile(r"\bfaec"), "fec"), (re.compile(r"\bcoeliac"), "celiac"), (re.compile(r"\bdiarrhoea"), "diarrhea"),
            (re.compile(r"\bleukaem"), "leukem"), (re.compile(r"\banaem"), "anem"), (re.compile(r"\boestr"), "estr"),
            (re.compile(r"\bpaed"), "ped"), (re.compile(r"\bhaemat"), "hemat"), (re.compile(r"\bischaem"), "ischem"))
_MAX_SYNONYMS = 6


@dataclass(slots=True, frozen=True)
class Finding:
    """One finding of the description: its words, where they are, whether it is denied, and its other names."""

    text: str  # the words of the description ("swollen testicle", "calcium 11.8 mg/dL")
    start: int  # [start, end) in the description
    end: int
    negated: bool = False
    kind: str = "finding"  # finding | lab (a measurement read against its range) | history | exposure
    names: tuple[str, ...] = ()  # what it may be written as, its own words first ("hypercalcemia", …)
    concept: str | None = None  # the HPO phenotype it names, or the abnormality a measurement shows

    @property
    def label(self) -> str:
        """How a reader is shown it: the abnormality a measurement shows, else its words."""
        return f"{self.concept} ({self.text})" if self.kind == "lab" and self.concept else self.text

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "start": self.start, "end": self.end, "negated": self.negated, "kind": self.kind,
                "concept": self.concept, "names": list(self.names)}


@dataclass(slots=True)
class PatientContext:
    """Age and sex: context a reader weighs, not findings to match."""

    age: float | None = None  # years
    sex: str | None = None  # "female" | "male"

    def to_dict(self) -> dict[str, Any]:
        return {"age": self.age, "sex": self.sex}


@dataclass(slots=True)
class Findings:
    description: str
    context: PatientContext
    findings: list[Finding] = field(default_factory=list)
    question: str | None = None  # a final exam question left out of the description

    @property
    def affirmed(self) -> list[Finding]:
        return [f for f in self.findings if not f.negated]

    @property
    def denied(self) -> list[Finding]:
        return [f for f in self.findings if f.negated]

    @property
    def patient_text(self) -> str:
        """The description without its final question."""
        return self.description if self.question is None else self.description[: self.description.rfind(self.question)]

    def to_dict(self) -> dict[str, Any]:
        return {"context": self.context.to_dict(), "question": self.question,
                "findings": [f.to_dict() for f in self.findings]}


def american(text: str) -> str:
    """British medical spellings in American form ("haemoptysis" → "hemoptysis"), lower case."""
    t = text.lower()
    for pattern, repl in _BRITISH:
        t = pattern.sub(repl, t)
    return t


def patient_context(text: str) -> PatientContext:
    ctx = PatientContext()
    m = _AGE_RE.search(text)
    if m:
        value, unit = float(m.group(1)), m.group(2).lower()
        ctx.age = value if unit in ("year", "yr") else round(value / {"month": 12, "week": 52, "day": 365}[unit], 2)
    else:
        words = re.findall(r"[a-z]+", text.lower())
        ctx.age = next((_AGE_WORDS[w] for w in words if w in _AGE_WORDS), None)
    words = re.findall(r"[a-z]+", text.lower()[:400])
    female = next((i for i, w in enumerate(words) if w in _FEMALE), None)
    male = next((i for i, w in enumerate(words) if w in _MALE), None)
    if female is not None or male is not None:
        ctx.sex = "female" if male is None or (female is not None and female < male) else "male"
    return ctx


def _sentences(text: str) -> list[tuple[int, int]]:
    spans, pos = [], 0
    for m in _SENTENCE_RE.finditer(text):
        spans.append((pos, m.start()))
        pos = m.end()
    spans.append((pos, len(text)))
    return [(a, b) for a, b in spans if text[a:b].strip()]


def _final_question(text: str, sentences: list[tuple[int, int]]) -> str | None:
    if not sentences:
        return None
    a, b = sentences[-1]
    last = text[a:b].strip().strip('"').strip()
    return last if _QUESTION_RE.match(last) else None


def _clauses(sentence: str) -> Iterable[tuple[int, int]]:
    pos = 0
    for m in _CLAUSE_RE.finditer(sentence):
        if m.start() > pos:
            yield pos, m.start()
        pos = m.end()
    if pos < len(sentence):
        yield pos, len(sentence)


def _content_span(clause: str) -> tuple[int, int] | None:
    """[start, end) of the clause's words from its first to its last that is not filler, age or a number alone."""
    ages = [(m.start(), m.end()) for m in _AGE_RE.finditer(clause)]
    words = [(m.start(), m.end(), m.group().lower()) for m in re.finditer(r"[A-Za-z][A-Za-z'\-]*[A-Za-z]|[A-Za-z]",
                                                                             clause)]
    keep = [(a, b) for a, b, w in words
            if w not in _FILLER and len(w) > 1 and not any(s <= a < e for s, e in ages)]
    if not keep:
        return None
    return keep[0][0], keep[-1][1]


def _kind(clause: str, sentence: str) -> str:
    if _EXPOSURE_RE.search(clause):
        return "exposure"
    if _HISTORY_RE.search(clause) and not _DURATION_RE.search(sentence):
        return "history"
    return "finding"


def extract_findings(description: str, synonyms: Callable[[str], list[str]] | None = None) -> Findings:
    """The findings of ``description`` (see the module docstring). ``synonyms``: a clause's other names (the HPO
    phenotypes it names and their synonyms: :class:`FindingNames`), none when not given."""
    from capr.cases.labs import read_measurements

    text = description
    sentences = _sentences(text)
    question = _final_question(text, sentences)
    if question is not None:
        sentences = sentences[:-1]
    out = Findings(text, patient_context(text), question=question)
    seen: set[str] = set()
    for a, b in sentences:
        sentence = text[a:b]
        negs = negations(sentence)
        taken: list[tuple[int, int]] = []
        for lab in read_measurements(sentence):
            taken.append((lab.start, lab.end))
            if lab.abnormality is None:
                continue  # within its range: nothing to match
            key = f"lab:{lab.abnormality}"
            if key not in seen:
                seen.add(key)
                out.findings.append(Finding(sentence[lab.start:lab.end], a + lab.start, a + lab.end, False, "lab",
                                            tuple(lab.names), lab.abnormality))
        for ca, cb in _clauses(sentence):
            span = _content_span(sentence[ca:cb])
            if span is None:
                continue
            s, e = ca + span[0], ca + span[1]
            if any(s < te and ts < e for ts, te in taken):
                continue
            words = sentence[s:e]
            key = american(" ".join(words.split()))
            if key in seen:
                continue
            seen.add(key)
            negated = any(n.negates(s, e) for n in negs) or _ends_negative(sentence[ca:cb])
            names = [key] + [n for n in (synonyms(key) if synonyms else []) if n != key][:_MAX_SYNONYMS]
            concept = names[1] if len(names) > 1 else None
            out.findings.append(Finding(words, a + s, a + e, negated, _kind(sentence[ca:cb], sentence),
                                        tuple(dict.fromkeys(names)), concept))
    return out


def _ends_negative(words: str) -> bool:
    """A test named with its result last: "Anti-dsDNA negative", "Coombs test: negative"."""
    return bool(re.search(r"\b(negative|neg|absent|not detected|nonreactive|non-reactive)[\s.;:!]*$", words, re.IGNORECASE))


class FindingNames:
    """A clause's other names: first the clinical terms its lay words stand for (capr.cases.lay_terms: "swollen
    testicle" → orchitis; HPO has no such phrase), then, for each longest run of its words that names an HPO
    phenotype (or a drug), that concept's EXACT and RELATED synonyms (capr.labels.synonyms: HPO's own file and the
    drug recogniser's dictionary, no ontology load), shortest first."""

    def __init__(self) -> None:
        from capr.labels.synonyms import entity_synonyms

        self.synonyms = entity_synonyms()
        self.longest = max((len(k.split()) for k in self.synonyms.groups_of), default=1)

    def __call__(self, clause: str) -> list[str]:
        from capr.cases.lay_terms import clinical_terms
        from capr.labels.gazetteer import normalize_name

        words = normalize_name(clause).split()
        out: list[str] = clinical_terms(clause)
        i = 0
        while i < len(words):
            for n in range(min(self.longest, len(words) - i), 0, -1):
                groups = self.synonyms.groups_of.get(" ".join(words[i:i + n]))
                if groups:
                    for g in groups:
                        out.extend(sorted(self.synonyms.groups[g], key=len)[:_MAX_SYNONYMS])
                    i += n
                    break
            else:
                i += 1
        return list(dict.fromkeys(out))


__all__ = ["Finding", "FindingNames", "Findings", "PatientContext", "american", "extract_findings", "patient_context"]
