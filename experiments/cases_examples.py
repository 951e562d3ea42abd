"""Issue 54's worked examples: where the expected diagnosis ranks among `capr cases similar`'s likely diagnoses
(the first 30), and the first N with the findings that support each.

    OMP_NUM_THREADS=1 python -m experiments.cases_examples --index IDX [--show 5]

IDX: the README's case index, `capr case-index --data-dir ../shared/data --out IDX --no-dense`.
"""

from __future__ import annotations

import argparse
import re

from capr.cases.similar import CaseFinder
from capr.index import Index

# description, and a pattern the expected diagnosis' name or code matches
EXAMPLES = {
    "brucellosis (README)": ("37-year-old man, fever, joint pain, swollen testicle after fresh cheese", r"brucell"),
    "giant-cell arteritis": ("A 72-year-old woman has a new headache over the temples for three weeks, pain in the jaw "
                             "when chewing, scalp tenderness and blurred vision in the right eye. She feels stiff in "
                             "the shoulders in the morning. ESR is 95 mm/h.", r"giant|temporal arteritis"),
    "diabetic ketoacidosis": ("A 19-year-old man has had polyuria, polydipsia and vomiting for two days, with "
                              "abdominal pain and weight loss. He breathes deeply and rapidly. Glucose 450 mg/dL, urine "
                              "ketones positive, pH 7.1, bicarbonate 10 mEq/L.", r"ketoacidosis"),
    "lung cancer with hypercalcaemia": ("A 67-year-old man who has smoked for 40 years has haemoptysis, a chronic "
                                        "cough and weight loss of 8 kg. He is confused and constipated. Serum calcium "
                                        "is 13.1 mg/dL. Chest X-ray shows a 4 cm mass in the right lung.",
                                        r"lung|bronch|C34"),
    "psoriatic arthritis": ("A 45-year-old man has pain and swelling of the distal finger joints of both hands, a "
                            "sausage-shaped swollen toe, pitting of the fingernails and silvery scaly plaques on the "
                            "elbows. Rheumatoid factor is negative.", r"psoria"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--show", type=int, default=5)
    args = ap.parse_args()
    finder = CaseFinder(Index.load(args.index))
    for name, (text, target) in EXAMPLES.items():
        res = finder.similar(text, k=3, evidence=0, diagnoses=30)
        rank = next((d.rank for d in res.diagnoses if re.search(target, f"{d.name} {d.code}", re.IGNORECASE)), None)
        print(f"\n### {name}: expected diagnosis at rank {rank if rank else 'none of 30'}")
        print("findings: " + "; ".join(("no " if f.negated else "") + f.label for f in res.findings.findings))
        for d in res.diagnoses[:args.show]:
            why = "; ".join(f"+{e.finding}" for e in d.supporting) + "".join(f"; −{e.finding}" for e in d.against)
            print(f"{d.rank}. {d.code or ''} {d.name} [{d.kind}; {','.join(d.sources)}] {why}")


if __name__ == "__main__":
    main()
