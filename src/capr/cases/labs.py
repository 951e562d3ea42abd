"""Measurements in a patient description read against adult reference ranges: "calcium 11.8 mg/dL" is
hypercalcemia, "pulse is 118/min" tachycardia, "temperature 39.4°C (103°F)" fever; a value within its range is no
finding. The ranges are the usual textbook adult ones (conventional US units; a value an order of magnitude off is
read in the other usual unit: a glucose of 25 is mmol/L, a platelet count of 95 is ×10³/µL); a measurement capr does
not know keeps its words as a finding of its own (capr.cases.findings)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUMBER = r"(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)"


@dataclass(slots=True, frozen=True)
class Range:
    """An analyte's names (a regex), its normal [low, high], what a value below or above shows (each with the other
    names it is written as) and, for a value given in another unit, the factor to conventional units."""

    pattern: str
    low: float | None
    high: float | None
    below: tuple[str, ...] = ()
    above: tuple[str, ...] = ()
    # (value below which the value is read as another unit, the factor that converts it)
    other_unit: tuple[float, float] | None = None


RANGES: tuple[Range, ...] = (
    Range(r"temperature|temp", 35.0, 38.0, ("hypothermia", "low body temperature"), ("fever", "pyrexia", "febrile")),
    Range(r"pulse|heart rate|pulse rate", 60, 100, ("bradycardia", "slow heart rate"), ("tachycardia", "rapid heart rate")),
    Range(r"respirations|respiratory rate|respiration rate", 10, 20, ("bradypnea",),
          ("tachypnea", "rapid breathing")),
    Range(r"oxygen saturation|o2 saturation|spo2|sao2|pulse oximetry", 92, None, ("hypoxemia", "hypoxia")),
    Range(r"glucose|blood sugar", 70, 200, ("hypoglycemia", "low blood sugar"), ("hyperglycemia", "high blood sugar"),
          (40, 18.0)),
    Range(r"sodium|na\+?", 135, 145, ("hyponatremia", "low sodium"), ("hypernatremia", "high sodium")),
    Range(r"potassium|k\+?", 3.5, 5.0, ("hypokalemia", "low potassium"), ("hyperkalemia", "high potassium")),
    Range(r"calcium|ca2\+|ca\+\+|ca", 8.5, 10.5, ("hypocalcemia", "low calcium"), ("hypercalcemia", "high calcium"),
          (4.0, 4.0)),
    Range(r"magnesium|mg2\+", 1.7, 2.4, ("hypomagnesemia", "low magnesium"), ("hypermagnesemia",)),
    Range(r"phosphorus|phosphate", 2.5, 4.5, ("hypophosphatemia", "low phosphate"), ("hyperphosphatemia",)),
    Range(r"bicarbonate|hco3-?|hco3−", 22, 28, ("low bicarbonate", "metabolic acidosis"), ("metabolic alkalosis",)),
    Range(r"ph", 7.35, 7.45, ("acidosis", "acidemia"), ("alkalosis", "alkalemia")),
    Range(r"hemoglobin|haemoglobin|hb|hgb", 12.0, 17.5, ("anemia", "low hemoglobin"), ("polycythemia",)),
    Range(r"hematocrit|haematocrit|hct", 36, 52, ("anemia", "low hematocrit"), ("polycythemia",)),
    Range(r"leukocyte count|leukocytes|white blood cell count|white blood cells|wbc count|wbc|white cell count",
          4000, 11000, ("leukopenia", "low white blood cell count"), ("leukocytosis", "high white blood cell count"),
          (200, 1000.0)),
    Range(r"platelet count|platelets|plt", 150000, 450000, ("thrombocytopenia", "low platelet count"),
          ("thrombocytosis", "high platelet count"), (2000, 1000.0)),
    Range(r"mean corpuscular volume|mcv", 80, 100, ("microcytosis", "microcytic anemia"), ("macrocytosis", "macrocytic anemia")),
    Range(r"creatinine", None, 1.3, (), ("elevated creatinine", "renal insufficiency", "kidney failure")),
    Range(r"blood urea nitrogen|urea nitrogen|bun", None, 22, (), ("elevated blood urea nitrogen", "azotemia")),
    Range(r"alanine aminotransferase|aspartate aminotransferase|alt|ast|sgpt|sgot", None, 45, (),
          ("elevated transaminases", "elevated liver enzymes")),
    Range(r"alkaline phosphatase|alk phos", None, 130, (), ("elevated alkaline phosphatase",)),
    Range(r"total bilirubin|bilirubin(?: \(total\))?|bilirubin, total", None, 1.3, (), ("hyperbilirubinemia", "jaundice")),
    Range(r"erythrocyte sedimentation rate|esr|sedimentation rate", None, 30, (),
          ("elevated erythrocyte sedimentation rate", "elevated esr")),
    Range(r"c-reactive protein|crp", None, 10, (), ("elevated c-reactive protein",)),
    Range(r"albumin", 3.5, None, ("hypoalbuminemia", "low albumin")),
    Range(r"thyroid-stimulating hormone|tsh", 0.4, 4.5, ("low tsh", "suppressed tsh"), ("elevated tsh",)),
    Range(r"lipase", None, 160, (), ("elevated lipase",)),
    Range(r"amylase", None, 140, (), ("elevated amylase", "hyperamylasemia")),
    Range(r"creatine kinase|ck|cpk", None, 300, (), ("elevated creatine kinase",)),
    Range(r"reticulocyte count|reticulocytes", None, 2.5, (), ("reticulocytosis",)),
    Range(r"ferritin", 20, 300, ("low ferritin", "iron deficiency"), ("elevated ferritin",)),
    Range(r"cholesterol|total cholesterol", None, 240, (), ("hypercholesterolemia",)),
    Range(r"triglycerides", None, 200, (), ("hypertriglyceridemia",)),
)
_BP_RE = re.compile(r"\b(?:blood pressure|bp)\b[^0-9]{0,20}?(\d{2,3})\s*/\s*(\d{2,3})", re.IGNORECASE)
_FAHRENHEIT_RE = re.compile(r"°\s*F|\bF\b|fahrenheit")
_PLUS_RE = re.compile(r"\b(ketones?|ketonuria|protein|proteinuria|glucose|nitrites?|leukocyte esterase|blood|hcg|"
                      r"beta-hcg|antinuclear antibod(?:y|ies)|ana|rheumatoid factor)\b[^.;,\n]{0,12}?\b(positive|\d\+|"
                      r"present|detected)\b", re.IGNORECASE)


@dataclass(slots=True, frozen=True)
class Measurement:
    start: int  # [start, end) in the sentence read
    end: int
    analyte: str
    value: float
    abnormality: str | None  # None: within its range
    names: tuple[str, ...] = ()


def _compiled() -> list[tuple[Range, re.Pattern[str]]]:
    out = []
    for r in RANGES:
        pattern = (rf"(?<![\w+-])(?:{r.pattern})(?![\w+])(?:\s+(?:level|levels|concentration|count))?"
                   rf"[^0-9a-z\n]{{0,12}}?(?:(?:is|was|of|at|measures|measured|are|were)\s+)?(?:[^0-9\n]{{0,6}}?)"
                   rf"{_NUMBER}")
        out.append((r, re.compile(pattern, re.IGNORECASE)))
    return out


_PATTERNS = _compiled()


def _value(raw: str) -> float:
    return float(raw.replace(",", ""))


def _read(r: Range, value: float, text_after: str) -> str | None:
    """The abnormality ``value`` shows, in conventional units, or None."""
    if r.pattern.startswith("temperature") and (value > 45 or _FAHRENHEIT_RE.match(text_after.strip())):
        value = (value - 32) * 5 / 9
    elif r.other_unit is not None and value < r.other_unit[0]:
        value *= r.other_unit[1]
    if r.low is not None and value < r.low and r.below:
        return r.below[0]
    if r.high is not None and value > r.high and r.above:
        return r.above[0]
    return None


def read_measurements(sentence: str) -> list[Measurement]:
    """The measurements of one sentence (or one line of a lab table), in text order, one per analyte name."""
    found: list[Measurement] = []
    taken: list[tuple[int, int]] = []

    def free(a: int, b: int) -> bool:
        return not any(a < te and ts < b for ts, te in taken)

    for m in _BP_RE.finditer(sentence):
        systolic, diastolic = float(m.group(1)), float(m.group(2))
        abn, names = None, ()
        if systolic >= 140 or diastolic >= 90:
            abn, names = "hypertension", ("hypertension", "high blood pressure")
        elif systolic < 90:
            abn, names = "hypotension", ("hypotension", "low blood pressure", "shock")
        found.append(Measurement(m.start(), m.end(), "blood pressure", systolic, abn, names))
        taken.append((m.start(), m.end()))
    for r, pattern in _PATTERNS:
        for m in pattern.finditer(sentence):
            if not free(m.start(), m.end()):
                continue
            value = _value(m.group(1))
            abn = _read(r, value, sentence[m.end():m.end() + 12])
            names = r.below if abn in r.below else r.above if abn in r.above else ()
            found.append(Measurement(m.start(), m.end(), r.pattern.split("|")[0], value, abn, tuple(names)))
            taken.append((m.start(), m.end()))
    for m in _PLUS_RE.finditer(sentence):
        if free(m.start(), m.end()):
            what = m.group(1).lower()
            found.append(Measurement(m.start(), m.end(), what, 1.0, f"positive {what}", (f"positive {what}", what)))
            taken.append((m.start(), m.end()))
    return sorted(found, key=lambda x: x.start)


__all__ = ["Measurement", "RANGES", "Range", "read_measurements"]
