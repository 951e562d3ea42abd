"""Distant supervision on real cases: a sentence encoder trained so that a case lies near the names of its
diagnoses, and so near the cases that share them.

Pairs (case text, ICD-10-CM name) come from two sources:
- **codes**: every diagnosis code of a coded case (CodiEsp train; never dev) — the clean source;
- **mentions**: every ICD-10-CM name an uncoded case mentions (E3C, CodiEsp background), with the mention
  masked in the text, as in Alghanmi et al. 2022 — so the model learns the description, not the string match.

The loss is in-batch softmax over cosine (multiple negatives ranking, scale 20); an in-batch name equal to the
positive is not a negative. The encoder is saved as a sentence-transformers folder with a capr model card, so
`capr index --dense --model DIR`, `capr case-index --model DIR` and the bench scripts load it like MiniLM."""

from __future__ import annotations

import random
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from capr._version import __version__
from capr.cases.icd10 import code_name, find_mentions
from capr.errors import BadInputError, CaprError
from capr.records import Document

Log = Callable[[str], None]

MASK = "[MASK]"


@dataclass
class DiagnosisArgs:
    base_model: str = "minilm"
    max_steps: int = 100_000
    time_budget_min: float | None = 15.0
    batch_size: int = 16
    lr: float = 3e-5
    max_length: int = 128  # case tokens seen in training (names are short)
    mentions_per_case: int = 3
    scale: float = 20.0
    seed: int = 13
    device: str | None = None


def diagnosis_pairs(docs: Iterable[Document], mentions_per_case: int = 3,
                    seed: int = 13) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """(case text, diagnosis name) pairs and their count per source. A document with a ``split`` of dev or test
    is refused: those cases measure the model."""
    rng = random.Random(seed)
    pairs: list[tuple[str, str]] = []
    counts = {"codes": 0, "mentions": 0}
    for doc in docs:
        if doc.metadata.get("split") in ("dev", "test"):
            raise BadInputError(doc.doc_id, f"a {doc.metadata['split']} case cannot be a training pair")
        codes = doc.metadata.get("diagnoses") or []
        if codes:
            for c in dict.fromkeys(codes):
                if name := code_name(c):
                    pairs.append((doc.text, name))
                    counts["codes"] += 1
            continue
        found = find_mentions(doc.text)
        for d in rng.sample(found, min(mentions_per_case, len(found))):
            masked = re.sub(r"(?<!\w)" + r"\W+".join(map(re.escape, d.mention.split())) + r"(?!\w)", MASK, doc.text,
                            flags=re.IGNORECASE)
            pairs.append((masked, d.name))
            counts["mentions"] += 1
    rng.shuffle(pairs)
    return pairs, counts


def train_diagnosis_encoder(pairs: Sequence[tuple[str, str]], out_dir: str | Path, args: DiagnosisArgs | None = None,
                            progress: bool = True, source: dict[str, Any] | None = None) -> Any:
    """Fine-tunes ``args.base_model`` on the pairs (see the module docstring); returns the loop's TrainResult."""
    from capr.cases.train import cycle_batches
    from capr.models.loading import local_path, quiet_transformers, resolve_model, st_features
    from capr.train.loop import LoopArgs, TrainingLoop

    args = args or DiagnosisArgs()
    if len(pairs) < args.batch_size:
        raise BadInputError("pairs", f"only {len(pairs)} training pairs; need at least {args.batch_size}")
    loop = TrainingLoop(LoopArgs(max_steps=args.max_steps, lr=args.lr, seed=args.seed, warmup=0.1,
                                 time_budget_min=args.time_budget_min),
                        out_dir, what="diagnosis encoder", desc="training diagnosis encoder", progress=progress,
                        device=args.device)
    quiet_transformers()
    import torch
    from sentence_transformers import SentenceTransformer

    device = loop.device
    model = SentenceTransformer(local_path(resolve_model(args.base_model)), device=str(device))
    model.max_seq_length = args.max_length
    batches = cycle_batches(len(pairs), args.batch_size, random.Random(args.seed))

    def embed(texts: list[str]) -> "torch.Tensor":
        feats = st_features(model, texts)
        feats = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in feats.items()}
        return torch.nn.functional.normalize(model(feats)["sentence_embedding"], dim=-1)

    def step() -> Any:
        batch = [pairs[i] for i in next(batches)]
        cases, names = embed([b[0] for b in batch]), embed([b[1] for b in batch])
        logits = args.scale * cases @ names.T
        same = torch.tensor([[a[1] == b[1] and i != j for j, b in enumerate(batch)] for i, a in enumerate(batch)],
                            device=device)
        logits = logits.masked_fill(same, float("-inf"))
        return torch.nn.functional.cross_entropy(logits, torch.arange(len(batch), device=device))

    def card() -> dict[str, Any]:
        return {"kind": "diagnosis-encoder", "capr_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "device": str(device), "args": asdict(args), "pairs": len(pairs), "source": source or {},
                "query_prefix": "", "passage_prefix": "", "query_model": None}

    def readme(c: dict[str, Any], r: Any) -> str:
        return (f"# capr diagnosis encoder\n\n{args.base_model} trained on {len(pairs):,} (case, ICD-10-CM name) pairs "
                f"({source or {}}) with in-batch negatives: {c['steps']} steps, batch {args.batch_size}, lr {args.lr}, "
                f"{r.seconds / 60:.1f} min ({c['stopped']}).\n\nUse: `capr case-index --model THIS_DIR`.\n")

    def write(tmp: Path) -> dict[str, Any]:
        model.save(str(tmp))
        return {}

    params = [p for p in model.parameters() if p.requires_grad]
    return loop.run(params, step, card=card, readme=readme, write=write, module=model)


def corpus_pairs(data_dir: str | Path, codes_only: bool = False, mentions_per_case: int = 3,
                 seed: int = 13) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """The training pairs of the local case corpus in ``data_dir``: the coded CodiEsp train cases and, unless
    ``codes_only``, the masked mentions of the uncoded CodiEsp background and E3C cases. CodiEsp dev is never read
    (it measures the model)."""
    from capr.cases.data import case_corpus

    sources = ("codiesp",) if codes_only else ("codiesp", "e3c")
    splits = ("train",) if codes_only else ("train", "background")
    pairs, counts = diagnosis_pairs(case_corpus(data_dir, sources, codiesp_splits=splits), mentions_per_case, seed)
    if not counts["codes"]:
        raise BadInputError(str(Path(data_dir) / "codiesp"), "no coded CodiEsp train case with a named diagnosis")
    return pairs, counts


def train_diagnoses(data_dir: str | Path, out_dir: str | Path, args: DiagnosisArgs | None = None, *,
                    codes_only: bool = False, progress: bool = True, log: Log | None = None) -> Any:
    """The diagnosis encoder trained on :func:`corpus_pairs` of ``data_dir``. Returns the loop's TrainResult; its
    card's ``source`` holds the pair counts."""
    args = args or DiagnosisArgs()
    if args.max_steps < 1:
        raise CaprError("--max-steps must be at least 1")
    if args.time_budget_min is not None and args.time_budget_min <= 0:
        raise CaprError("--time-budget must be a positive number of minutes")
    pairs, counts = corpus_pairs(data_dir, codes_only, args.mentions_per_case, args.seed)
    if log is not None:
        log(f"{len(pairs):,} (case, diagnosis name) pairs: {counts['codes']:,} from codes, "
            f"{counts['mentions']:,} from masked mentions")
    return train_diagnosis_encoder(pairs, out_dir, args, progress=progress, source=counts)


__all__ = ["DiagnosisArgs", "MASK", "corpus_pairs", "diagnosis_pairs", "train_diagnoses", "train_diagnosis_encoder"]
