"""`capr adapt`'s gate: every candidate model scored on the held-out checks as the index would search with it, the
one to keep (it must gain on held-out labels and be no worse on any free-text check), the hybrid fusion's dense share
it searches with, and whether the ensemble second stage is worth its latency."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from capr.adapt.checks import (
    FREE_TEXT,
    SELF,
    CheckScores,
    SearchedCheck,
    check_metrics,
    dense_scores,
    reranked_check_metrics,
)
from capr.eval.significance import paired_randomisation_p

START = "start"  # the zero-shot candidate's name


@dataclass
class Candidate:
    name: str
    model: str  # a model name or folder
    alpha: float  # trained share (0: the start model)
    scores: CheckScores = field(default_factory=CheckScores)  # ranked as the index searches: hybrid (the gate's)
    dense: CheckScores = field(default_factory=CheckScores)  # ranked by the model alone (reported)
    sims: dict[str, list[Any]] = field(default_factory=dict)  # check → each query's candidate cosines
    indexes: dict[str, Path] = field(default_factory=dict)  # searched check → its index built with this model


def gate(candidates: list[Candidate], checks: Sequence[Any], min_gain: float,
         margin: float = 0.0) -> tuple[Candidate, str]:
    """The candidate to keep, and why: the one with the best held-out-label score among those that gain at least
    `min_gain` MRR over the start model there and trail it by at most `margin` points on every free-text check
    (MAP/MRR, the check's primary metric); the start model when none does."""
    start = next(c for c in candidates if c.alpha == 0)
    self_checks = [c for c in checks if c.side == SELF]
    free = [c for c in checks if c.side == FREE_TEXT]
    passing, failures = [], []
    for cand in candidates:
        if cand is start:
            continue
        gains = {c.name: cand.scores.mean(c.name, c.primary) - start.scores.mean(c.name, c.primary) for c in self_checks}
        losses = {c.name: cand.scores.mean(c.name, c.primary) - start.scores.mean(c.name, c.primary) for c in free}
        short = [f"{n} {g:+.2f} {next(c.primary for c in self_checks if c.name == n)}"
                 for n, g in gains.items() if g < min_gain]
        worse = [f"{n} {d:+.2f} {next(c.primary for c in free if c.name == n)}" for n, d in losses.items()
                 if d < -margin - 1e-9]
        if short or worse:
            failures.append(f"{cand.name}: " + "; ".join(
                ([f"gains too little on {', '.join(short)}"] if short else []) + ([f"worse on {', '.join(worse)}"] if worse else [])))
        else:
            passing.append((sum(gains.values()), cand.alpha, cand))
    if not self_checks:
        return start, "no held-out labelled queries to show a gain: the start model is kept"
    if not free:
        failures.append("no free-text check could be built from the corpus (too few held-out passages)")
        return start, "the start model is kept: " + " | ".join(failures)
    if not passing:
        return start, "no candidate passed the gate, the start model is kept (" + " | ".join(failures) + ")"
    passing.sort(key=lambda t: (t[0], t[1]), reverse=True)
    best = passing[0][2]
    gain = passing[0][0]
    within = "at or above" if margin == 0 else f"within {margin:g} point(s) of"
    return best, (f"{best.name} gains {gain:+.2f} on held-out labels and is {within} the start model on every "
                  f"free-text check" + (f" (rejected: {' | '.join(failures)})" if failures else ""))


def fusion_with_share(dense_weight: float | None = None) -> Any:
    """The default pipeline's hybrid fusion (capr.search.DEFAULT_FUSION), with another dense share when given."""
    from dataclasses import replace

    from capr.search.config import DEFAULT_FUSION

    if dense_weight is None:
        return replace(DEFAULT_FUSION)
    return replace(DEFAULT_FUSION, weights=(round(1.0 - dense_weight, 4), round(dense_weight, 4)))


def score_candidates(candidates: Sequence[Candidate], checks: Sequence[Any], log: Callable[[str], None] = print,
                     work: Path | None = None) -> None:
    """Every candidate on every check, read as an index built with it would read passages, and ranked as that
    index searches by default (``scores``, what the gate compares: the Searcher on a searched check, BM25 and the
    model fused on a pool) and by the model alone (``dense``). Searched checks' indexes go under ``work``."""
    import re
    import tempfile

    from capr.models.encoder import Encoder, EncoderConfig
    from capr.records import Retriever

    fusion = fusion_with_share()
    root = Path(work) if work is not None else Path(tempfile.mkdtemp(prefix="capr-gate-"))
    for cand in candidates:
        log(f"gate: scoring {cand.name}")
        encoder = None
        for check in checks:
            if isinstance(check, SearchedCheck):
                folder = check.build(cand.model, root / re.sub(r"[^A-Za-z0-9.]+", "-", f"{check.name}-{cand.name}"))
                cand.indexes[check.name] = folder
                cand.scores.per_query[check.name] = check.metrics(folder)
                cand.dense.per_query[check.name] = check.metrics(folder, retriever=Retriever.dense)
                continue
            encoder = encoder or Encoder(EncoderConfig(model=cand.model), cache=False)
            cand.sims[check.name] = dense_scores(encoder, check)
            cand.scores.per_query[check.name] = check_metrics(check, cand.sims[check.name], fusion)
            cand.dense.per_query[check.name] = check_metrics(check, cand.sims[check.name])


def check_under_fusion(check: Any, cand: Candidate, fusion: Any) -> dict[str, Any]:
    """A scored candidate's per-query metrics on ``check`` when the index fuses with ``fusion`` instead."""
    if isinstance(check, SearchedCheck):
        return check.metrics(cand.indexes[check.name], fusion)
    return check_metrics(check, cand.sims[check.name], fusion)


def choose_fusion(kept: Candidate, start: Candidate, checks: Sequence[Any], weights: Sequence[float],
                  min_gain: float, margin: float) -> dict[str, Any]:
    """The dense share of the hybrid fusion the kept model searches with: the default pipeline's, unless another
    of ``weights`` gains at least ``min_gain`` on the held-out labels and stays within ``margin`` of the start model
    (at the default share) on every free-text check. The table of every share is returned with the choice."""
    base = fusion_with_share().weights[1]
    self_checks = [c for c in checks if c.side == SELF]
    free = [c for c in checks if c.side == FREE_TEXT]
    table: dict[str, dict[str, float]] = {}
    for w in sorted(set(weights) | {base}):
        fusion = fusion_with_share(w)
        table[f"{w:g}"] = {c.name: round(float(check_under_fusion(c, kept, fusion)[c.primary].mean()), 2) for c in checks}

    def gain(w: float) -> float:
        return sum(table[f"{w:g}"][c.name] - table[f"{base:g}"][c.name] for c in self_checks)

    def free_ok(w: float) -> bool:
        return all(table[f"{w:g}"][c.name] >= start.scores.mean(c.name, c.primary) - margin - 1e-9 for c in free)

    chosen = base
    if self_checks:
        better = [w for w in sorted(set(weights)) if w != base and gain(w) >= min_gain and free_ok(w)]
        if better:
            chosen = max(better, key=lambda w: (gain(w), -abs(w - base)))
    why = ("the default pipeline's share" if chosen == base else
           f"{gain(chosen):+.2f} on held-out labels over the default share {base:g}, within {margin:g} point(s) of "
           "the start model on every free-text check")
    return {"dense_weight": chosen, "weights": list(fusion_with_share(chosen).weights), "reason": why, "table": table}


def reranker_member(model: str) -> str:
    """The `bi:` spec of a model (the start model's name "minilm" is the bundled model)."""
    return f"bi:{model if model == 'minilm' else Path(model).resolve()}"


def choose_second_stage(kept: Candidate, trained: Candidate, start_model: str, checks: Sequence[Any], fusion: Any,
                        min_gain: float, margin: float, depth: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Whether the ensemble of the start model and the trained one, re-ranking the kept first stage's top
    ``depth``, is worth its latency: kept when it gains at least ``min_gain`` on some check (held-out labels or free
    text, the check's primary metric) and trails the first stage alone by at most ``margin`` on every check that
    decides. The table holds every check without and with it, and the paired p-values."""
    from capr.search.second_stage import load_reranker

    spec = f"{reranker_member(start_model)},{reranker_member(trained.model)}"
    ensemble = load_reranker(spec)
    table: dict[str, dict[str, float]] = {}
    paired: dict[str, float] = {}
    gains: dict[str, float] = {}
    for check in checks:
        log(f"second stage: {check.name}")
        without = check_under_fusion(check, kept, fusion)
        if isinstance(check, SearchedCheck):
            with_it = check.metrics(kept.indexes[check.name], fusion, reranker=ensemble)
        else:
            with_it = reranked_check_metrics(check, kept.sims[check.name], fusion, ensemble, depth)
        a, b = float(without[check.primary].mean()), float(with_it[check.primary].mean())
        table[check.name] = {"without": round(a, 2), "with": round(b, 2), "primary": check.primary}
        paired[check.name] = round(paired_randomisation_p(with_it[check.primary], without[check.primary]), 4)
        if check.side in (SELF, FREE_TEXT):
            gains[check.name] = b - a
    keep, why = second_stage_verdict(gains, any(c.side == FREE_TEXT for c in checks), min_gain, margin)
    return {"kept": keep, "spec": spec, "depth": depth, "reason": why, "table": table, "paired": paired}


def second_stage_verdict(gains: dict[str, float], free_text_checked: bool, min_gain: float,
                         margin: float) -> tuple[bool, str]:
    """(keep, why) for the ensemble second stage, from its gain over the first stage alone on each deciding check:
    as for the first stage, nothing is kept that no free-text check has seen — "no worse on free text" needs one."""
    worse = [f"{n} {g:+.2f}" for n, g in gains.items() if g < -margin - 1e-9]
    best = max(gains.items(), key=lambda t: t[1]) if gains else ("", 0.0)
    if not free_text_checked:
        return False, "no free-text check could be built from the corpus (too few held-out passages; --free-text-dev adds one)"
    if worse:
        return False, f"worse than the first stage alone on {', '.join(worse)}"
    if best[1] < min_gain:
        return False, f"gains less than {min_gain:g} point(s) on every check (best: {best[0]} {best[1]:+.2f})"
    return True, (f"gains {best[1]:+.2f} on {best[0]} and is within {margin:g} point(s) of the first stage alone on "
                  "every check")


__all__ = ["Candidate", "START", "check_under_fusion", "choose_fusion", "choose_second_stage", "fusion_with_share", "gate",
           "reranker_member", "score_candidates", "second_stage_verdict"]
