"""Clinical and consumer shorthand a health question may use, and what it stands for ("afib" → atrial fibrillation).

Source: written for capr from common clinical shorthand as clinicians chart it and as consumers write it; each
expansion is the condition's or the term's ordinary English name (the one MedlinePlus and HPO titles use). Where the
Human Phenotype Ontology lists the same abbreviation (hp.obo, synonym type "abbreviation"), the row names the HPO term;
HPO's other abbreviation synonyms that name one term are added when the lexicon is built
(:func:`capr.labels.lexicon.hpo_abbreviations`). Left out on purpose: shorthand with two common readings ("ASD":
atrial septal defect or autism spectrum disorder; "CP": cerebral palsy or chest pain; "ER": emergency room or
extended release).

``cased``: the shorthand is also an English word ("SOB", "AIDS", "MS", "ED"), so it is read only when written in
capitals.
"""

from __future__ import annotations

from typing import NamedTuple


class Abbreviation(NamedTuple):
    short: str
    long: str
    cased: bool = False  # read only when written in capitals
    hpo: str = ""  # the HPO term listing it as an abbreviation synonym


ABBREVIATIONS: tuple[Abbreviation, ...] = (
    # heart and vessels
    Abbreviation("afib", "atrial fibrillation"),
    Abbreviation("a-fib", "atrial fibrillation"),
    Abbreviation("AF", "atrial fibrillation", cased=True),
    Abbreviation("chf", "congestive heart failure", hpo="HP:0001635"),
    Abbreviation("htn", "hypertension"),
    Abbreviation("hbp", "high blood pressure"),
    Abbreviation("bp", "blood pressure"),
    Abbreviation("MI", "myocardial infarction", cased=True, hpo="HP:0001658"),
    Abbreviation("cad", "coronary artery disease"),
    Abbreviation("dvt", "deep vein thrombosis"),
    Abbreviation("PE", "pulmonary embolism", cased=True),
    Abbreviation("cva", "stroke"),
    Abbreviation("tia", "transient ischemic attack", hpo="HP:0002326"),
    Abbreviation("PAD", "peripheral artery disease", cased=True),
    Abbreviation("pvd", "peripheral vascular disease"),
    Abbreviation("aaa", "abdominal aortic aneurysm"),
    Abbreviation("ekg", "electrocardiogram"),
    Abbreviation("ecg", "electrocardiogram"),
    Abbreviation("ldl", "low density lipoprotein cholesterol"),
    Abbreviation("hdl", "high density lipoprotein cholesterol"),
    Abbreviation("inr", "international normalized ratio"),
    # breathing
    Abbreviation("SOB", "shortness of breath", cased=True),
    Abbreviation("copd", "chronic obstructive pulmonary disease", hpo="HP:0006510"),
    Abbreviation("uri", "upper respiratory infection"),
    Abbreviation("urti", "upper respiratory tract infection"),
    Abbreviation("osa", "obstructive sleep apnea"),
    Abbreviation("ards", "acute respiratory distress syndrome", hpo="HP:0033677"),
    Abbreviation("rsv", "respiratory syncytial virus"),
    Abbreviation("TB", "tuberculosis", cased=True),
    # metabolism, kidneys, digestion
    Abbreviation("DM", "diabetes mellitus", cased=True),
    Abbreviation("dm2", "type 2 diabetes mellitus"),
    Abbreviation("t2dm", "type 2 diabetes mellitus"),
    Abbreviation("dm1", "type 1 diabetes mellitus"),
    Abbreviation("t1dm", "type 1 diabetes mellitus"),
    Abbreviation("a1c", "hemoglobin a1c"),
    Abbreviation("hba1c", "hemoglobin a1c"),
    Abbreviation("tsh", "thyroid stimulating hormone"),
    Abbreviation("bmi", "body mass index"),
    Abbreviation("ckd", "chronic kidney disease", hpo="HP:0012622"),
    Abbreviation("esrd", "end stage renal disease"),
    Abbreviation("uti", "urinary tract infection"),
    Abbreviation("bph", "benign prostatic hyperplasia"),
    Abbreviation("gerd", "gastroesophageal reflux disease", hpo="HP:0002020"),
    Abbreviation("gord", "gastroesophageal reflux disease", hpo="HP:0002020"),
    Abbreviation("ibs", "irritable bowel syndrome"),
    Abbreviation("ibd", "inflammatory bowel disease"),
    Abbreviation("UC", "ulcerative colitis", cased=True),
    Abbreviation("nafld", "nonalcoholic fatty liver disease"),
    Abbreviation("GI", "gastrointestinal", cased=True),
    # brain, mind, joints, immunity
    Abbreviation("adhd", "attention deficit hyperactivity disorder", hpo="HP:0007018"),
    Abbreviation("ADD", "attention deficit disorder", cased=True),
    Abbreviation("ocd", "obsessive compulsive disorder"),
    Abbreviation("ptsd", "post traumatic stress disorder"),
    Abbreviation("MS", "multiple sclerosis", cased=True),
    Abbreviation("als", "amyotrophic lateral sclerosis"),
    Abbreviation("rls", "restless legs syndrome"),
    Abbreviation("bppv", "benign paroxysmal positional vertigo"),
    Abbreviation("RA", "rheumatoid arthritis", cased=True, hpo="HP:0001370"),
    Abbreviation("OA", "osteoarthritis", cased=True),
    Abbreviation("sle", "systemic lupus erythematosus", hpo="HP:0002725"),
    Abbreviation("amd", "age related macular degeneration"),
    Abbreviation("CF", "cystic fibrosis", cased=True),
    Abbreviation("sids", "sudden infant death syndrome"),
    Abbreviation("pcos", "polycystic ovary syndrome"),
    Abbreviation("ED", "erectile dysfunction", cased=True),
    # infections
    Abbreviation("hiv", "human immunodeficiency virus"),
    Abbreviation("AIDS", "acquired immunodeficiency syndrome", cased=True),
    Abbreviation("std", "sexually transmitted disease"),
    Abbreviation("sti", "sexually transmitted infection"),
    Abbreviation("hpv", "human papillomavirus"),
    Abbreviation("hsv", "herpes simplex virus"),
    Abbreviation("hcv", "hepatitis c virus"),
    Abbreviation("hbv", "hepatitis b virus"),
    Abbreviation("cmv", "cytomegalovirus"),
    Abbreviation("ebv", "epstein barr virus"),
    Abbreviation("mrsa", "methicillin resistant staphylococcus aureus"),
    # medicines and how they are given
    Abbreviation("otc", "over the counter"),
    Abbreviation("nsaid", "nonsteroidal anti inflammatory drug"),
    Abbreviation("nsaids", "nonsteroidal anti inflammatory drugs"),
    Abbreviation("ssri", "selective serotonin reuptake inhibitor"),
    Abbreviation("ssris", "selective serotonin reuptake inhibitors"),
    Abbreviation("snri", "serotonin norepinephrine reuptake inhibitor"),
    Abbreviation("maoi", "monoamine oxidase inhibitor"),
    Abbreviation("tca", "tricyclic antidepressant"),
    Abbreviation("ppi", "proton pump inhibitor"),
    Abbreviation("ppis", "proton pump inhibitors"),
    Abbreviation("arb", "angiotensin receptor blocker"),
    Abbreviation("ACE", "angiotensin converting enzyme", cased=True),
    Abbreviation("hrt", "hormone replacement therapy"),
    Abbreviation("benzo", "benzodiazepine"),
    Abbreviation("benzos", "benzodiazepines"),
    Abbreviation("abx", "antibiotics"),
    Abbreviation("hctz", "hydrochlorothiazide"),
    Abbreviation("mtx", "methotrexate"),
    Abbreviation("ntg", "nitroglycerin"),
    Abbreviation("ASA", "aspirin", cased=True),
    Abbreviation("IV", "intravenous", cased=True),
    Abbreviation("IM", "intramuscular", cased=True),
    Abbreviation("subq", "subcutaneous"),
    Abbreviation("PO", "by mouth", cased=True),
    Abbreviation("prn", "as needed"),
    Abbreviation("BID", "twice a day", cased=True),
    Abbreviation("TID", "three times a day", cased=True),
    Abbreviation("QID", "four times a day", cased=True),
    Abbreviation("rx", "prescription"),
    # charting shorthand
    Abbreviation("hx", "history"),
    Abbreviation("dx", "diagnosis"),
    Abbreviation("tx", "treatment"),
    Abbreviation("sx", "symptoms"),
    Abbreviation("fx", "fracture"),
    Abbreviation("sz", "seizure"),
    Abbreviation("abd", "abdominal"),
    Abbreviation("HA", "headache", cased=True),
    Abbreviation("n/v", "nausea and vomiting"),
    Abbreviation("cbc", "complete blood count"),
    Abbreviation("crp", "c reactive protein"),
    Abbreviation("esr", "erythrocyte sedimentation rate"),
    Abbreviation("psa", "prostate specific antigen"),
    Abbreviation("mri", "magnetic resonance imaging"),
    Abbreviation("CT", "computed tomography", cased=True),
    Abbreviation("vit", "vitamin"),
)

# Brands of combination products the drug recogniser's dictionary lacks (its dictionary reads single-ingredient
# brands, and some combinations: "bactrim", "advair"). Source: the products' US prescribing labels (DailyMed).
COMBINATION_BRANDS: tuple[tuple[str, str], ...] = (
    ("vicodin", "hydrocodone and acetaminophen"),
    ("norco", "hydrocodone and acetaminophen"),
    ("lortab", "hydrocodone and acetaminophen"),
    ("percocet", "oxycodone and acetaminophen"),
    ("endocet", "oxycodone and acetaminophen"),
    ("percodan", "oxycodone and aspirin"),
    ("ultracet", "tramadol and acetaminophen"),
    ("augmentin", "amoxicillin and clavulanate"),
    ("vytorin", "ezetimibe and simvastatin"),
    ("hyzaar", "losartan and hydrochlorothiazide"),
    ("lotrel", "amlodipine and benazepril"),
    ("janumet", "sitagliptin and metformin"),
    ("sinemet", "carbidopa and levodopa"),
    ("treximet", "sumatriptan and naproxen"),
    ("lomotil", "diphenoxylate and atropine"),
    ("yaz", "drospirenone and ethinyl estradiol"),
    ("nyquil", "acetaminophen dextromethorphan and doxylamine"),
    ("dayquil", "acetaminophen dextromethorphan and phenylephrine"),
)

__all__ = ["ABBREVIATIONS", "Abbreviation", "COMBINATION_BRANDS"]
