"""Shared by the similar-case tests: a tiny data folder in the shipped case-report formats (CodiEsp, E3C)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

# (text, ICD-10-CM diagnosis codes) of the coded CodiEsp train cases
CODED_CASES = [
    ("A 35-year-old man consulted for fever and a swollen tender left testis. Ultrasound showed an enlarged "
     "epididymis with increased Doppler flow. He was treated for epididymo-orchitis with antibiotics.", ["N45.3", "R50.9"]),
    ("A 50-year-old woman presented with haematuria and right flank pain. CT showed a 9 mm stone in the right "
     "ureter with mild hydronephrosis. The kidney stone was removed by ureteroscopy.", ["R31.9", "N20.0"]),
    ("A 6-year-old boy had ascites and oedema of the legs for two weeks. Proteinuria was heavy and albumin low. "
     "Nephrotic syndrome responded to steroids.", ["N04.9", "R18.8"]),
    ("A 41-year-old man had chronic cough and night sweats for three months. Sputum smear showed acid-fast "
     "bacilli. Pulmonary tuberculosis was treated for six months.", ["A15.0", "R05"]),
    ("A 68-year-old woman with essential hypertension for years came with chest pain at rest. The "
     "electrocardiogram was normal and troponin negative.", ["I10", "R07.9"]),
    ("A 59-year-old man with type 2 diabetes had a foot ulcer on the right heel for two months. Cultures grew "
     "Staphylococcus aureus.", ["E11.9", "L97.509"]),
    ("A 33-year-old woman had anaemia with fatigue after heavy menstrual bleeding. Haemoglobin was 7.9 g/dl and "
     "she received iron.", ["D64.9", "R53.83"]),
    ("A 24-year-old man had two seizures in one week. MRI showed a brain tumour in the left temporal lobe.",
     ["R56.9", "D49.6"]),
]


def write_tiny_case_data(root: Path) -> Path:
    """``root``/codiesp/cases.jsonl.gz (the coded train cases above, 2 dev cases that must stay unread by training
    and case indexes, 2 uncoded background cases) and ``root``/e3c_english/cases.jsonl.gz (2 narratives that
    mention diagnoses)."""
    (root / "codiesp").mkdir(parents=True)
    (root / "e3c_english").mkdir()
    rows = [{"id": f"t{i}", "split": "train", "text": t, "diagnoses": c, "procedures": []}
            for i, (t, c) in enumerate(CODED_CASES)]
    rows += [{"id": f"d{i}", "split": "dev", "text": "Dev case: fever and a swollen testis.", "diagnoses": ["R50.9"],
              "procedures": []} for i in range(2)]
    rows += [{"id": f"b{i}", "split": "background", "text": "A woman with pneumonia and fever was admitted.",
              "diagnoses": [], "procedures": []} for i in range(2)]
    with gzip.open(root / "codiesp" / "cases.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    e3c = [{"id": f"EN{i}", "doi": f"10.0/{i}", "licence": "CC BY 4.0",
            "text": "A 45-year-old man presented with ascites and hepatomegaly. Testis ultrasound was normal."}
           for i in range(2)]
    with gzip.open(root / "e3c_english" / "cases.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in e3c)
    return root
