"""Request and response bodies of the HTTP API (pydantic models; they are the OpenAPI spec)."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, StrictBool, StrictFloat, StrictInt, StringConstraints,
                      field_validator, model_validator)

from capr.records import Retriever
from capr.search.second_stage import DEFAULT_RERANK_SHARE, ENSEMBLE_RERANK_SHARE
from capr.search import EntityScope, GroupBy
from capr.search.config import DEFAULT_ASPECT_BOOST
from capr.records import DOC_ID_MAX_LENGTH, check_doc_id


def _valid_text(s: str) -> str:
    # A lone surrogate (legal in JSON "\ud800") cannot be encoded as UTF-8: it would fail later, when
    # the passage store or the response is written, so it is refused here with the field's name.
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (it contains a lone surrogate)") from None
    return s


def _finite(x: float) -> float:
    if not math.isfinite(x):
        raise ValueError("must be a finite number")
    return x


def _integral(x: Any) -> Any:
    # JSON Schema counts 8.0 as an integer; strict pydantic would not
    return int(x) if isinstance(x, float) and x.is_integer() else x


Count = Annotated[int, BeforeValidator(_integral)]
Text = Annotated[str, AfterValidator(_valid_text)]
Short = Annotated[str, StringConstraints(max_length=200), AfterValidator(_valid_text)]
FieldName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")]
# Strict members: in lax mode a union would turn the string "007" into the integer 7 (a too-long
# string even slips through as an integer), silently changing stored metadata.
Scalar = Union[Annotated[str, StringConstraints(max_length=256), AfterValidator(_valid_text)], StrictBool, StrictInt,
               Annotated[StrictFloat, AfterValidator(_finite)]]
MetaValue = Union[Annotated[str, StringConstraints(max_length=10_000), AfterValidator(_valid_text)], StrictBool,
                  StrictInt, Annotated[StrictFloat, AfterValidator(_finite)], None]
# Document ids follow capr.records.check_doc_id, the rule the readers and the CLI apply too; the
# pattern only states its gist in the spec (no surrounding blanks), the validator decides.
DOC_ID_PATTERN = r"^\S(.*\S)?$"


def _doc_id(v: str) -> str:
    return check_doc_id(v)


DocId = Annotated[str, AfterValidator(_doc_id), Field(json_schema_extra={"pattern": DOC_ID_PATTERN, "maxLength": DOC_ID_MAX_LENGTH})]


class _Strict(BaseModel):
    # extra="forbid": a misspelt field is a 422 naming it, not silently ignored; strict: no lax
    # coercions (false is not 0.0, "10" is not 10): what the spec says is what is accepted
    model_config = ConfigDict(extra="forbid", strict=True)


# dict keys that do not match the field-name pattern are invalid in the spec too
_KEYS_CLOSED = {"additionalProperties": False}


def _valid_filter(s: str) -> str:
    from capr.errors import QueryError
    from capr.filters import parse_filter

    try:
        parse_filter(s)
    except QueryError as e:
        raise ValueError(str(e)) from None
    return s


# "charttime>=2150-01-01", "category in (Discharge summary, Radiology)": the CLI's --filter syntax
FilterText = Annotated[str, StringConstraints(min_length=1, max_length=500), AfterValidator(_valid_text), AfterValidator(_valid_filter)]
# {FIELD: VALUE} (equality, as before) or a list of clauses with ranges and sets (capr.filters)
# (a callable discriminator: a bad clause is reported as such, not as "should be a valid dictionary")
Filters = Annotated[Union[Annotated[dict[FieldName, Scalar], Field(max_length=20, json_schema_extra=_KEYS_CLOSED), Tag("dict")],
                          Annotated[list[FilterText], Field(max_length=20), Tag("list")]],
                    Discriminator(lambda v: "list" if isinstance(v, list) else "dict")]


# ------------------------------------------------------------------------------------------ search
_NON_BLANK = {"type": "string", "pattern": r"\S"}


class SearchRequest(_Strict):
    # The "text or entity or aspect" rule, stated in the spec too (so generated clients and
    # schema-driven fuzzers know that an empty query is invalid).
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"anyOf": [
        {"required": [f], "properties": {f: _NON_BLANK}} for f in ("text", "entity", "aspect")]})
    text: Optional[Annotated[str, StringConstraints(max_length=2_000), AfterValidator(_valid_text)]] = Field(
        None, description="Free-text question.", examples=["how is atrial fibrillation treated"])
    entity: Optional[Short] = Field(None, description="Entity of a structured question.", examples=["IgA nephropathy"])
    aspect: Optional[Short] = Field(None, description="Aspect of a structured question.", examples=["symptoms"])
    k: Count = Field(10, ge=1, le=100, description="Number of passages.")
    filters: Filters = Field(default_factory=dict, description="Metadata filters: {FIELD: VALUE} (equality), or a list of "
                             "clauses with ranges and sets, e.g. [\"subject_id=10006\", \"charttime>=2150-01-01\", "
                             "\"category in (Discharge summary, Radiology)\"].")
    # strict would refuse the JSON string "bm25"; None: the best the index supports (hybrid with vectors, else bm25)
    retriever: Optional[Retriever] = Field(None, strict=False, description="bm25, tfidf, dense or hybrid; default: "
                                           "hybrid when the index has vectors, else bm25.")
    entity_scope: EntityScope = Field(EntityScope.document, strict=False, description="⟨entity, aspect⟩: document — "
                                      "passages of documents that name the entity first; passage — passages that name it "
                                      "first (the only scope of top-list backends such as Milvus).")
    entity_synonyms: bool = Field(True, description="⟨entity, aspect⟩: the entity's other names (HPO exact and related synonyms; a "
                                  "drug's generic, brand and salt names) count as mentions of it.")
    reading: bool = Field(False, description="Read a free-text question as a pharmacist would: a drug's brand as its "
                          "generic name ('valium' as diazepam), clinical shorthand ('afib'), a misspelling one letter "
                          "from a word of the index; what was read is in the response's reading.")
    fusion_by_question: bool = Field(False, description="Give BM25 dense's share for a free-text question whose words "
                                     "are rare in this index (mean IDF); off by default.")
    fusion_probe: bool = Field(False, description="Fuse a free-text question as this index's own cloze probe asks "
                               "(measured once per index generation): BM25 alone where the encoder finds fewer "
                               "answers than BM25 there, else the default.")
    group_by: GroupBy = Field(GroupBy.passage, strict=False, description="passage, or doc: one result per document "
                              "(its best passage).")
    reranker: Optional[Annotated[str, StringConstraints(min_length=1, max_length=500), AfterValidator(_valid_text)]] = Field(
        None, description="Re-ranker spec (e.g. cross:DIR); must be one the server enables, or the one the index records "
        "(capr adapt), which is used when none is named; \"none\": no second stage.")
    rerank_share: Optional[float] = Field(None, ge=0.0, le=1.0, description="With a re-ranker: its share when its "
                                "ranking is fused with the first stage's (1 = its order alone, within the entity's "
                                f"passages and with the aspect prior; 0 = the first stage's order); default "
                                f"{DEFAULT_RERANK_SHARE}, an ensemble's {ENSEMBLE_RERANK_SHARE}.")
    evidence: bool = Field(True, description="Score each sentence and flag evidence sentences.")
    expand: bool = Field(True, description="Expand the aspect with its synonyms.")
    aspect_boost: float = Field(DEFAULT_ASPECT_BOOST, ge=0.0, le=10.0, description="Score ×(1+b) for passages from the aspect asked about.")

    @model_validator(mode="after")
    def _not_empty(self) -> "SearchRequest":
        if not any(v and v.strip() for v in (self.text, self.entity, self.aspect)):
            raise ValueError("empty query: give text, or entity and/or aspect")
        return self


class SentenceOut(BaseModel):
    text: str
    start: int = Field(description="Offset in the document text.")
    end: int
    score: float
    evidence: bool


class SearchResult(BaseModel):
    rank: int
    pid: str
    doc_id: str
    title: str
    aspect: Optional[str]
    heading: str
    score: float
    start: int = Field(description="Offset of the passage in its document's text; every span below is a document offset.")
    end: int
    text: str
    highlights: list[tuple[int, int]] = Field(description="Query-term spans (document offsets).")
    snippet: Optional[str] = Field(None, description="The passage's window with most query terms.")
    snippet_start: Optional[int] = Field(None, description="Offset of the snippet in the passage text.")
    sentences: Optional[list[SentenceOut]] = Field(None, description="Per-sentence scores (when evidence is on).")
    document_url: str
    metadata: dict[str, Any]


class QueryEcho(BaseModel):
    text: Optional[str]
    entity: Optional[str]
    aspect: Optional[str]


class ReadWordOut(BaseModel):
    text: str = Field(description="The word (or name) as the question writes it.", examples=["valium"])
    read_as: str = Field(description="What it was read as.", examples=["diazepam"])
    kind: str = Field(description="drug, finding, abbreviation or spelling.", examples=["drug"])


class SearchResponse(BaseModel):
    query: QueryEcho
    retriever: str
    fusion: Optional[dict[str, Any]] = Field(None, description="How a hybrid first stage fused BM25 and dense for this "
                                             "query: method and weights (a question of rare words gets BM25 as dense).")
    reranker: Optional[str]
    evidence_method: Optional[str]
    generation: str
    took_ms: float
    notices: list[str] = Field(default_factory=list, description="What to know about these results, e.g. that no "
                               "passage mentions the entity asked about (the closest matches are shown).")
    reading: list[ReadWordOut] = Field(default_factory=list, description="What the question was read as, one entry per "
                                       "word read: a drug brand as its generic name, shorthand, a misspelling.")
    results: list[SearchResult]


# --------------------------------------------------------------------------------------- documents
class DocumentIn(_Strict):
    doc_id: DocId = Field(
        description=f"Printable text, at most {DOC_ID_MAX_LENGTH} characters, no surrounding blanks, no '.' or '..' "
                    "path segments (an existing id is replaced).", examples=["note_123"])
    title: Annotated[str, StringConstraints(max_length=500), AfterValidator(_valid_text)] = Field("", examples=["Asthma ED note"])
    text: Annotated[str, StringConstraints(min_length=1, max_length=1_000_000), AfterValidator(_valid_text)] = Field(
        examples=["HISTORY OF PRESENT ILLNESS: wheeze and cough for two days."])
    metadata: dict[FieldName, MetaValue] = Field(default_factory=dict, max_length=50, json_schema_extra=_KEYS_CLOSED)

    @field_validator("text")
    @classmethod
    def _has_words(cls, v: str) -> str:
        if not re.search(r"\w", v):
            raise ValueError("text has no words")  # it would be stored but could never be found
        return v


class SectionOut(BaseModel):
    heading: str
    aspect: str
    start: int
    end: int
    section_id: Optional[str] = None


class DocumentOut(BaseModel):
    doc_id: str
    title: str
    text: str
    metadata: dict[str, Any]
    sections: Optional[list[SectionOut]]


class AddResponse(BaseModel):
    doc_id: str
    passages: int = Field(description="Passages the document was split into.")
    replaced: bool = Field(description="Whether a document with this id was replaced.")
    generation: str


class DeleteResponse(BaseModel):
    doc_id: str
    deleted: bool
    generation: str


# ------------------------------------------------------------------------------------------- cases
class CaseRequest(_Strict):
    description: Annotated[str, StringConstraints(min_length=1, max_length=20_000), AfterValidator(_valid_text)] = Field(
        description="Patient description.", examples=["62-year-old with exertional dyspnoea, orthopnoea and ankle oedema"])
    hypotheses: list[Annotated[str, StringConstraints(min_length=1, max_length=200), AfterValidator(_valid_text)]] = Field(
        min_length=1, max_length=20, examples=[["heart failure", "asthma", "pneumonia"]])
    k: Count = Field(3, ge=1, le=10, description="Supporting passages shown per hypothesis, best first (its score is the best one's).")
    filters: Filters = Field(default_factory=dict)

    @model_validator(mode="after")
    def _not_blank(self) -> "CaseRequest":
        if not self.description.strip():
            raise ValueError("description is blank")
        for i, h in enumerate(self.hypotheses):
            if not h.strip():
                raise ValueError(f"hypothesis {i + 1} is blank")
        return self


class SupportOut(BaseModel):
    pid: str
    doc_id: str
    title: str
    aspect: Optional[str]
    score: float
    start: int
    end: int
    text: str
    highlights: list[tuple[int, int]]
    document_url: str


class HypothesisOut(BaseModel):
    hypothesis: str
    rank: int
    score: float = Field(description="The score of the best supporting case, by the pipeline's scorer (cross-encoder, dense cosine or BM25; see the response's method).")
    candidates: int = Field(description="Live passages that mention the hypothesis (capped at 1,000).")
    notice: str | None = Field(None, description="Said when no passage mentions the hypothesis: what its score and "
                                                 "passages are instead (passages closest to its words, or its own text).")
    passages: list[SupportOut]


class CaseResponse(BaseModel):
    method: str
    generation: str
    took_ms: float
    hypotheses: list[HypothesisOut]


class SimilarCasesRequest(_Strict):
    description: Annotated[str, StringConstraints(min_length=1, max_length=20_000), AfterValidator(_valid_text)] = Field(
        description="Patient description.", examples=["37-year-old man with fever, joint pain and a swollen testicle"])
    k: Count = Field(10, ge=1, le=50, description="Cases to return.")
    retriever: Literal["auto", "bm25", "dense", "hybrid"] = Field(
        "auto", description="auto: hybrid when the index has vectors, else bm25.")
    labelled_only: StrictBool = Field(False, description="Only cases that carry diagnosis codes.")
    evidence: Count = Field(2, ge=0, le=10, description="Sentences per case that make it similar.")
    diagnoses: Count = Field(10, ge=0, le=50, description="Likely diagnoses to rank (0: none).")

    @model_validator(mode="after")
    def _not_blank(self) -> "SimilarCasesRequest":
        if not self.description.strip():
            raise ValueError("description is blank")
        return self


class DiagnosisOut(BaseModel):
    code: Optional[str] = Field(description="ICD-10-CM code; null for a mention no code names.")
    name: str = Field(description="English ICD-10-CM name (empty when the code is not in ICD-10-CM).")
    kind: Literal["label", "mention"] = Field(description="label: the case's own code; mention: an ICD-10-CM name found in its text.")
    category: Optional[str] = Field(description="ICD-10 category: the code's first three characters.")
    mention: Optional[str] = None


class CaseEvidenceOut(BaseModel):
    sentence: str = Field(description="A sentence of the similar case.")
    query_sentence: str = Field(description="The description's sentence it shares the most rare words with.")
    score: float
    shared: list[str] = Field(description="The analysed words both sentences hold, rarest first.")
    highlights: list[tuple[int, int]] = Field(description="[start, end) of the shared words in sentence.")
    query_highlights: list[tuple[int, int]] = Field(description="[start, end) of the shared words in query_sentence.")


class SimilarCaseOut(BaseModel):
    doc_id: str
    rank: int
    score: float
    source: str
    labelled: bool
    diagnoses: list[DiagnosisOut]
    evidence: list[CaseEvidenceOut]
    text: str
    document_url: str


class FindingEvidenceOut(BaseModel):
    finding: str = Field(description="The patient's finding, as read from the description.")
    negated: bool = Field(description="The description denies it (it argues against the diagnosis).")
    sentence: str = Field(description="The sentence of the profile, or of a passage naming the diagnosis, that says it.")
    doc_id: str
    source: Literal["profile", "passage"]
    share: float = Field(description="Share of the finding's words (idf-weighted) the sentence holds.")


class LikelyDiagnosisOut(BaseModel):
    name: str = Field(description="The condition, as its profile or ICD-10-CM names it.")
    code: Optional[str] = Field(description="ICD-10-CM code, where its name has one.")
    rank: int
    score: float = Field(description="Fused reciprocal-rank score of the profile, passage, dense, similar-case and "
                                     "name rankings.")
    kind: Literal["diagnosis", "finding", "factor"] = Field(
        description="finding: a symptom code (R00–R99, G89) or a condition that restates a finding of the patient; "
                    "factor: an external cause or a factor influencing health (V–Z); both listed after the diagnoses.")
    cases: int = Field(description="How many of the 20 most similar coded cases carry the code.")
    case_ids: list[str]
    profile: list[str] = Field(description="Documents of its profile in the index.")
    supporting: list[FindingEvidenceOut] = Field(description="Affirmed findings its profile or passages say.")
    against: list[FindingEvidenceOut] = Field(description="Denied findings its profile or passages say.")
    sources: list[str] = Field(description="The rankings that put it forward.")


class PatientFindingOut(BaseModel):
    text: str
    start: int
    end: int
    negated: bool
    kind: Literal["finding", "lab", "history", "exposure"]
    concept: Optional[str]
    names: list[str]


class PatientFindingsOut(BaseModel):
    context: dict[str, Any] = Field(description="Age (years) and sex: context, not findings.")
    question: Optional[str] = Field(description="A final exam question left out of the description.")
    findings: list[PatientFindingOut]


class LikelyCodeOut(BaseModel):
    code: str = Field(description="ICD-10-CM code.")
    name: str = Field(description="Its ICD-10-CM name.")
    rank: int
    score: float = Field(description="Fused reciprocal-rank score of the similar cases' votes and the name matches.")
    cases: int = Field(description="How many of the 20 most similar coded cases carry the code.")
    name_words: list[str] = Field(description="Analysed words its name shares with the description.")


class SimilarCasesResponse(BaseModel):
    retriever: str
    generation: str
    took_ms: float
    notices: list[str]
    findings: Optional[PatientFindingsOut] = Field(None, description="What the description says the patient has "
                                                   "(affirmed) and has not (denied).")
    diagnoses: list[LikelyDiagnosisOut] = Field(description="The differential diagnosis: conditions whose profiles, "
                                                "passages and similar coded cases match the findings, best first; "
                                                "coded symptoms after them, labelled kind=finding.")
    codes: list[LikelyCodeOut] = Field(default_factory=list, description="Likely codes, for coding: the codes of the "
                                       "most similar coded cases voted and fused with the codes whose names match the "
                                       "description, symptoms among them as coders code them; best first.")
    cases: list[SimilarCaseOut]


# ------------------------------------------------------------------------------------------- other
class HealthResponse(BaseModel):
    status: Literal["starting", "ok", "failed"] = Field(description="starting: loading the models and caches searches "
                                                       "need (HTTP 503); ok: ready (200); failed: a model could not be "
                                                       "loaded (503, the reason in error).")
    ready: bool
    error: Optional[str] = None
    generation: str
    documents: int
    passages: int
    auth_reads: bool


class StatsResponse(BaseModel):
    generation: str
    created: Optional[str]
    documents: int
    passages: int
    vocabulary: int
    segments: int
    fields: list[str]
    aspects: int
    has_dense: bool
    retrievers: list[str]
    rerankers: list[str]
    default_retriever: str = Field(description="What a search that names no retriever uses (as `capr search`).")
    default_reranker: Optional[str] = Field(description="The second stage a search that names no re-ranker uses: the one "
                                            "the index records (capr adapt), else none.")
    auth_reads: bool
    writes_enabled: bool


class VocabularyResponse(BaseModel):
    field: str
    prefix: str
    values: list[str]
    total: int = Field(description="Matching values before the limit.")


class ErrorOut(BaseModel):
    detail: str
    field: Optional[str] = Field(None, description="The request field at fault, when there is one.")


class ValidationErrorItem(BaseModel):
    loc: list[Union[str, int]]
    msg: str
    type: str


class ValidationErrorOut(BaseModel):
    detail: list[ValidationErrorItem]
    message: str = Field(description="The first problem, as 'field: reason'.")
