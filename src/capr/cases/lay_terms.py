"""The clinical terms a patient's lay words stand for, so that a finding matches the profiles clinicians write:
a patient has a "swollen testicle", a textbook describes "orchitis"; a patient ate "fresh cheese", the article on
brucellosis names "unpasteurized dairy products".

HPO's synonyms (capr.cases.findings.FindingNames) already carry many lay names of phenotypes ("joint pain" is an
EXACT layperson synonym of Arthralgia), but only as whole phrases: HPO has no "swollen testicle", and no ontology
says which exposures a disease's "causes" section calls an ingested cheese. Three small tables close that gap:

- ``ORGANS``: a body part's lay nouns and the clinical terms for it swollen or painful. A clause
  that holds a lay noun and a word of swelling ("swollen", "enlarged", "inflamed") or of pain ("sore", "aching") gets
  those terms: "swollen testicle" → orchitis, epididymitis, testicular swelling; "sore throat" → pharyngitis.
- ``PHRASES``: lay phrases whose clinical word HPO does not list as their synonym ("passing out" → syncope).
- ``EXPOSURES``: what a patient ate, drank, touched or met, as the risk a disease's causes passage names ("fresh
  cheese" → unpasteurized dairy products, raw milk). Fresh and homemade cheeses are the unpasteurized ones that
  carry Brucella and Listeria, which is why a cheese counts as unpasteurized dairy whatever it is called.

The tables are general clinical vocabulary (the terms a clinician would write for the lay words), not tuned to any
benchmark question. Matching is on lower-case words."""

from __future__ import annotations

import re

# a word of swelling or of pain in the clause decides which of an organ's terms apply
# (not "mass" or "lump": a mass in a testicle or a breast is a tumour until shown otherwise, not an inflammation)
_SWELLING = re.compile(r"(?<!non-)(?<!non )(?<!no )\b(?:swollen|swelling|swell(?:s|ed)?|enlarged|enlargement|"
                       r"inflamed|inflammation|puffy|bulging)\b")
# (not "tender": tenderness is a sign an examiner elicits, not the pain a patient has, and "non-tender" denies it)
_PAIN = re.compile(r"(?<!non-)(?<!non )(?<!no )\b(?:pain|painful|headaches?|sore|soreness|aches?|aching|hurts?|"
                   r"hurting)\b")


# organ: (its lay nouns (a regex alternation), terms when swollen, terms when painful)
ORGANS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "testis": (r"testicles?|testis|testes|testicular|scrotum|scrotal",
               ("orchitis", "epididymitis", "epididymo-orchitis", "orchiepididymitis", "testicular swelling",
                "scrotal swelling"),
               ("testicular pain", "orchialgia", "orchitis", "epididymitis")),
    "joint": (r"joints?|knees?|ankles?|wrists?|elbows?|knuckles?",
              ("arthritis", "joint swelling", "synovitis", "joint effusion"),
              ("arthralgia", "joint pain", "polyarthralgia", "arthritis")),
    "lymph node": (r"(?<!salivary )glands?|lymph nodes?|nodes",
                   ("lymphadenopathy", "lymph node enlargement", "swollen lymph nodes", "adenopathy"),
                   ("lymphadenitis", "tender lymphadenopathy")),
    "liver": (r"liver", ("hepatomegaly", "enlarged liver"), ("hepatitis", "right upper quadrant pain")),
    "spleen": (r"spleen", ("splenomegaly", "enlarged spleen"), ("splenic infarction", "left upper quadrant pain")),
    "parotid": (r"parotids?|cheeks?|salivary glands?", ("parotitis", "parotid swelling"), ("parotitis",)),
    "throat": (r"throat", ("pharyngitis", "tonsillitis"), ("pharyngitis", "sore throat", "odynophagia")),
    "legs": (r"legs?|feet|foot|calf|calves",
             ("edema", "peripheral edema", "leg swelling", "pitting edema"), ("leg pain", "myalgia")),
    "face": (r"face|eyelids?", ("facial edema", "periorbital edema", "angioedema"), ("facial pain",)),
    "belly": (r"belly|tummy|stomach|abdomen",
              ("abdominal distension", "ascites", "bloating"), ("abdominal pain",)),
    "digits": (r"fingers?|toes?|digits?", ("dactylitis", "sausage digit", "finger swelling"), ("finger pain",)),
    "muscle": (r"muscles?", ("myositis",), ("myalgia", "muscle pain")),
    "bone": (r"bones?", ("bone swelling",), ("bone pain", "ostealgia")),
    "gums": (r"gums?", ("gingivitis", "gingival swelling"), ("gingivitis",)),
    "tongue": (r"tongue", ("glossitis", "macroglossia"), ("glossitis",)),
    "breast": (r"breasts?", ("mastitis", "breast swelling"), ("mastalgia", "breast pain")),
    "ear": (r"ears?", ("otitis",), ("otalgia", "ear pain")),
    "eye": (r"eyes?", ("periorbital edema", "proptosis"), ("eye pain", "ocular pain")),
    "temples": (r"temples?|temporal", ("temporal artery tenderness",), ("temporal headache",)),
    "head": (r"head", (), ("headache", "cephalalgia")),
}
_ORGAN_RE = {organ: re.compile(rf"\b(?:{nouns})\b") for organ, (nouns, _, _) in ORGANS.items()}

# lay phrase (regex) → clinical terms HPO does not list as its synonyms
PHRASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"short(?:ness)? of breath|breathless|out of breath|can'?t breathe", ("dyspnea",)),
    (r"pass(?:ed|ing)? out|faint(?:ed|ing|s)?|black(?:ed)? out", ("syncope",)),
    (r"blood in (?:the |his |her )?urine|bloody urine|red urine", ("hematuria",)),
    (r"blood in (?:the |his |her )?stools?|bloody stools?|bloody diarrh?ea", ("hematochezia", "bloody diarrhea")),
    (r"black stools?|tarry stools?", ("melena",)),
    (r"coughing up blood|cough(?:s|ed)? up blood|blood(?:y)? sputum", ("hemoptysis",)),
    (r"vomiting blood|vomited blood|throwing up blood", ("hematemesis",)),
    (r"yellow(?:ing)? (?:of )?(?:the )?(?:skin|eyes)|yellow skin|turned yellow", ("jaundice", "icterus")),
    (r"urinat\w* (?:a lot|frequently|often)|frequent urination|peeing a lot", ("polyuria", "urinary frequency")),
    (r"(?:very|excessively|always) thirsty|excessive thirst|increased thirst|drinking a lot", ("polydipsia",)),
    (r"throwing up|threw up|vomited", ("vomiting",)),
    (r"stiff neck|neck stiffness", ("neck stiffness", "nuchal rigidity", "meningismus")),
    (r"stiff(?:ness)?\b.*\bmorning|morning stiffness", ("morning stiffness",)),
    (r"pain\b.*\bchewing|chewing\b.*\bpain|jaw\b.*\bchew", ("jaw claudication",)),
    (r"itch(?:y|ing|es)?", ("pruritus",)),
    (r"sausage[- ]shaped|sausage[- ]like", ("dactylitis", "sausage digit")),
    (r"silvery|scaly plaques?", ("psoriatic plaques", "psoriasis", "scaly plaques")),
    (r"pitt(?:ing|ed)\b.*\bnails?|nail pitting", ("nail pitting", "pitted nails", "nail pits")),
    (r"bruis(?:es|ing) easily|easy bruising", ("easy bruising", "ecchymoses")),
    (r"nose ?bleeds?", ("epistaxis",)),
    (r"hair loss|losing (?:his |her )?hair", ("alopecia",)),
    (r"heartburn", ("pyrosis", "gastroesophageal reflux")),
    (r"racing heart|heart racing|pounding heart", ("palpitations", "tachycardia")),
    (r"runny nose", ("rhinorrhea",)),
    (r"night sweats|sweating at night", ("night sweats", "nocturnal sweating")),
    (r"confused|confusion|disoriented", ("confusion", "altered mental status")),
    (r"constipated", ("constipation",)),
    (r"pins and needles|tingling", ("paresthesia",)),
    (r"double vision|seeing double", ("diplopia",)),
    (r"blurred vision|blurry vision|vision loss|loss of vision", ("visual loss", "visual impairment")),
    (r"smok(?:es|ed|er|ing)|cigarettes|pack[- ]years?", ("smoking", "tobacco use", "smokers")),
    (r"drinks? (?:heavily|alcohol)|heavy drink\w*|alcoholic", ("alcohol use", "alcoholism")),
)
_PHRASE_RE = tuple((re.compile(rf"\b(?:{p})\b"), terms) for p, terms in PHRASES)

# an exposure (regex) → the risk a disease's causes passage names
EXPOSURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"cheeses?|(?<!breast )milk(?![- ]alkali| of magnesia)|dairy|yogh?urts?", ("unpasteurized dairy products", "unpasteurized milk",
                                                       "raw milk", "dairy products")),
    (r"raw meat|undercooked|rare (?:meat|beef|steak|hamburgers?)|hamburgers?|ground beef",
     ("undercooked meat", "raw meat", "undercooked beef")),
    (r"pork|pigs?|swine|boar", ("undercooked pork", "pigs", "swine")),
    (r"shellfish|oysters?|clams?|mussels?|seafood|sushi|raw fish", ("raw shellfish", "oysters", "seafood", "raw fish")),
    (r"eggs?|poultry|chicken(?! ?pox)", ("raw eggs", "undercooked poultry", "poultry")),
    (r"goats?|sheep|lambs?|cattle|cows?|livestock|farm\w*|slaughter\w*|abattoir", ("livestock", "farm animals",
                                                                                    "cattle", "goats", "sheep")),
    (r"cats?|kittens?", ("cat scratch", "cats", "kittens")),
    (r"dogs?|puppy|puppies", ("dog bite", "dogs")),
    (r"birds?|parrots?|parakeets?|pigeons?", ("birds", "parrots", "bird droppings")),
    (r"rats?|mice|mouse|rodents?", ("rodents", "rat urine", "rodent droppings")),
    (r"ticks?|camping|hik\w+|woods|forest", ("tick bite", "ticks")),
    (r"mosquito\w*", ("mosquito bites", "mosquitoes")),
    (r"swimming|lake|river|fresh ?water|pond", ("freshwater", "contaminated water")),
    (r"caves?|bats?", ("bats", "bat guano", "caves")),
)
_EXPOSURE_RE = tuple((re.compile(rf"\b(?:{p})\b"), terms) for p, terms in EXPOSURES)


def clinical_terms(clause: str) -> list[str]:
    """The clinical terms the clause's lay words stand for, organs first, then phrases, then exposures (none when
    it has none). The clause in American spelling, as capr.cases.findings hands it over ("diarrhoea" → "diarrhea"
    there: this module stays below findings)."""
    text = " ".join(clause.lower().split())
    out: list[str] = []
    swollen, painful = bool(_SWELLING.search(text)), bool(_PAIN.search(text))
    if swollen or painful:
        for organ, pattern in _ORGAN_RE.items():
            if pattern.search(text):
                _, swelling, pain = ORGANS[organ]
                out += list(swelling if swollen else ()) + list(pain if painful else ())
    for pattern, terms in _PHRASE_RE:
        if pattern.search(text):
            out += terms
    for pattern, terms in _EXPOSURE_RE:
        if pattern.search(text):
            out += terms
    return [t for t in dict.fromkeys(out) if t != text]


__all__ = ["EXPOSURES", "ORGANS", "PHRASES", "clinical_terms"]
