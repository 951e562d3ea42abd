"""Whether a mention is negated ("No lymphadenopathy.", "denies chest pain", "pneumonia was ruled out").

ConText's negation (Harkema et al. 2009) with medspaCy's English rules for negated existence, read without spaCy so
that a search can ask it of its candidates: a trigger negates what follows it (or precedes it) to the end of the
sentence, unless a terminating word ("but", "except", "presents", …) or another negation trigger comes first.
``tests/test_negation.py`` checks it against medspaCy's ConText on real clinical notes."""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

# Each rule: words separated by spaces; "a|b" is either word, a trailing "?" makes the word optional.
FORWARD = (
    "absence of",
    "adequate|sufficient to rule him|her|them|patient|pt? out against|for?",
    "adequate|sufficient to rule the patient|pt out against|for?",
    "any other",
    "as well as any",
    "can|did rule him|her|them|patient|pt? out against|for?",
    "can|did rule the patient|pt out against|for?",
    "checked for",
    "clear of",
    "decline|declined|declines|declining",
    "deny|denied|denies|denying",
    "does|did not|n't look like",
    "evaluate for",
    "fails to reveal",
    "free of",
    "inconsistent with",
    "lack of",
    "lacked|lacking",
    "negative|neg for",
    "never developed|had",
    "no abnormal|new?",
    "no cause|history|findings|complaints|sign|signs|suggestion of|for",
    "no findings to indicate",
    "no new|other? mammographic|radiographic? evidence of|for?",
    "no significant|suspicious",
    "not|n't appear|appreciate|demonstrate|exhibit|feel|had|have|reveal|see?",
    "not|n't associated with",
    "not|n't complain|know of",
    "not|n't have evidence of|for",
    "not|n't known to have",
    "not|n't to be",
    "patient|pt was|is not|n't",
    "rather than",
    "resolved",
    "ruled|rules him|her|them|patient|pt? out against|for?",
    "ruled|rules the patient|pt out against|for?",
    "test for",
    "to exclude",
    "unremarkable for",
    "was|is|are|can not|n't",
    "with no",
    "without",
    "without any? evidence|indication|sign of|for?",
)
BACKWARD = (
    "are|is|was ruled out",
    "free",
    "has been negative",
    "has|have been ruled out",
    "no longer present",
    "not|n't significant|suspicious",
    "non - diagnostic",
    "now resolved",
    "prophylaxis",
    "unlikely",
    "was|is|are negative|neg",
    ": none",
    ": no",
    "are not evident",
    "negative on",
)
# end a negation's scope: ConText's terminating rules of every category
TERMINATE = (
    "apart for|from",
    "as a|an|the secondary? cause|etiology|source|reason for|of",
    "as has",
    "aside from",
    "but|however|nevertheless|still|except|though|although|yet",
    "cause|causes|reason|reasons|etiology for|of",
    "origin|origins of|for",
    "other possibilities of",
    "secondary to?",
    "source|sources for|of",
    "trigger event for",
    "because|since",
    "present|presenting|presents",
    "comes in with",
)
# ConText's triggers of the other assertions (possible, hypothetical, historical, family): they negate nothing,
# but a negation trigger inside one of them is not one ("not ruled out" is possible, not negated)
OTHER = (
    "as needed",
    "aunt|aunts|brother|brothers|child|children|cousin|cousins|dad|dads|daughter|daughters|fam|family|families|father|"
    "fathers|grandchild|grandchildren|granddaughter|granddaughters|grandfather|grandfathers|grandmother|grandmothers|"
    "grandparent|grandparents|grandson|grandsons|husband|mom|moms|mother|mothers|nephew|nephews|niece|nieces|parent|"
    "parents|partner|sibling|siblings|sister|sisters|son|sons|spouse|uncle|uncles|wife 's|'?",
    "come back for|to",
    "concerned|concerning for|about",
    "did|could not|n't rule out",
    "doubt",
    "history|hx|hist|ho",
    "h / o",
    "if",
    "may|might|must|should|will|could|can? be ruled out",
    "may|might|must|should|will|could|can? be ruled out for",
    "may|might be",
    "not|n't been? ruled out",
    "is|ought to be ruled out for|against?",
    "past medical? history",
    "poss|possible|probably|likely",
    "r / o",
    "return",
    "ro",
    "may|might|must|should|will|could? rule him|her|them|patient|pt? out against|for?",
    "may|might|must|should|will|could? rule the patient|pt out against|for?",
    "should she|he|they|patient|pt",
    "should the patient|pt",
    "should there",
    "suggestive of",
    "suspicious for",
    "what must be ruled out is",
    "worrisome for",
    "worried about",
)
_FORWARD, _BACKWARD, _TERMINATE, _OTHER = "forward", "backward", "terminate", "other"
# words as spaCy splits them: "don't" → do + n't, "cannot" → can + not
_TOKEN = re.compile(r"n't|\w+(?=n't)|(?<![^\W_])can(?=not\b)|\w+|[^\w\s]")


def _compile(rule: str) -> "Pattern":
    out = []
    for word in rule.split():
        optional = word.endswith("?") and len(word) > 1
        out.append((frozenset(word.rstrip("?").split("|") if optional else word.split("|")), optional))
    return tuple(out)


Pattern = tuple[tuple[frozenset[str], bool], ...]


@lru_cache(maxsize=1)
def _rules_by_first_word() -> dict[str, list[tuple[str, Pattern]]]:
    """The rules a word can open (a rule whose first words are optional is listed under each word it may open
    with), so that a sentence is matched against a handful of rules per word, not all of them."""
    out: dict[str, list[tuple[str, Pattern]]] = {}
    for kind, rules in ((_FORWARD, FORWARD), (_BACKWARD, BACKWARD), (_TERMINATE, TERMINATE), (_OTHER, OTHER)):
        for rule in rules:
            pattern = _compile(rule)
            for alternatives, optional in pattern:
                for word in alternatives:
                    out.setdefault(word, []).append((kind, pattern))
                if not optional:
                    break
    return out


def _ends(pattern: "Pattern", words: Sequence[str], i: int) -> set[int]:
    """Every token index where ``pattern`` matching from ``i`` can end (optional words give several)."""
    ends = {i}
    for alternatives, optional in pattern:
        step = {j + 1 for j in ends if j < len(words) and words[j] in alternatives}
        ends = step | ends if optional else step
        if not ends:
            return set()
    return ends


def _triggers(words: Sequence[str]) -> list[tuple[int, int, str]]:
    """(start, end, kind) of each trigger, a trigger inside a longer one dropped (as ConText prunes them) unless
    the two negate in opposite directions: in "Skin: no rash" the backward ": no" must not swallow the "no" that
    negates the rash (medspaCy's ConText drops it)."""
    rules = _rules_by_first_word()
    found = {(i, j, kind) for i, word in enumerate(words) for kind, pattern in rules.get(word, ())
             for j in _ends(pattern, words, i) if j > i}
    spans = sorted(found, key=lambda t: (t[0], -t[1]))
    by_start: dict[int, list[tuple[int, int, str]]] = {}
    for t in spans:
        by_start.setdefault(t[0], []).append(t)
    longest = max((t[1] - t[0] for t in spans), default=0)
    # a trigger can only lie inside one that starts at most the longest trigger's length before it
    return [t for t in spans if not any(o[1] >= t[1] and (o[1] - o[0]) > (t[1] - t[0]) and not _opposite(t[2], o[2])
                                        for i in range(max(0, t[0] - longest), t[0] + 1) for o in by_start.get(i, ()))]


def _opposite(kind: str, other: str) -> bool:
    return {kind, other} == {_FORWARD, _BACKWARD}


@dataclass(frozen=True, slots=True)
class Negation:
    """One negation trigger of a sentence and the characters it negates (character offsets into the sentence)."""

    trigger: tuple[int, int]
    scope: tuple[int, int]

    def negates(self, start: int, end: int) -> bool:
        """Whether it negates the mention at ``[start, end)``: its scope overlaps the mention and the trigger does
        not (in "lack of appetite", named as an entity, "lack of" is part of the name, as ConText reads it)."""
        (a, b), (t, u) = self.scope, self.trigger
        return a < end and start < b and not (t < end and start < u)


@lru_cache(maxsize=1)
def _negation_words() -> frozenset[str]:
    """A word every negating rule needs (of each rule, the words of one place it cannot match without: no common verb
    or preposition where it can, the fewest alternatives, the longest words): a sentence holding none of them has no
    negation, so most sentences are passed over without matching any rule."""
    common = {"a", "an", "the", "be", "is", "was", "are", "has", "have", "had", "can", "did", "does", "to", "with",
              "as", "for", "of", "out", "any", "him", "her", "them", "patient", "pt", "now", ":"}
    keys: set[str] = set()
    for rule in FORWARD + BACKWARD:
        required = [alternatives for alternatives, optional in _compile(rule) if not optional]
        keys |= min(required, key=lambda a: (bool(a & common), len(a), -min(map(len, a))))
    if "not" in keys:
        keys.add("cannot")  # one word to \w+, "can" + "not" to _TOKEN
    return frozenset(keys)


_WORD = re.compile(r"\w+")


def negations(sentence: str) -> list[Negation]:
    """Every negation trigger of ``sentence`` with its scope: to the sentence's edge in the trigger's direction, cut
    short by a terminating word or another negation trigger on the way."""
    return _read_negations(sentence) if _may_negate(sentence) else []


def _may_negate(sentence: str) -> bool:
    lowered = sentence.lower()
    return "n't" in lowered or not _negation_words().isdisjoint(_WORD.findall(lowered))


def _read_negations(sentence: str) -> list[Negation]:
    tokens = [(m.group().lower(), m.start(), m.end()) for m in _TOKEN.finditer(sentence)]
    words = [w for w, _, _ in tokens]
    triggers = _triggers(words)
    cuts = [t for t in triggers if t[2] != _OTHER]
    starts, ends = sorted(t[0] for t in cuts), sorted(t[1] for t in cuts)
    out = []
    for start, end, kind in triggers:
        if kind in (_TERMINATE, _OTHER):
            continue
        if kind == _FORWARD:
            i = bisect_left(starts, end)
            lo, hi = end, starts[i] if i < len(starts) else len(words)
        else:
            i = bisect_right(ends, start)
            lo, hi = ends[i - 1] if i else 0, start
        if lo < hi:
            out.append(Negation((tokens[start][1], tokens[end - 1][2]), (tokens[lo][1], tokens[hi - 1][2])))
    return out


def is_negated(sentence: str, start: int, end: int) -> bool:
    """Whether the mention at ``sentence[start:end]`` is negated."""
    return any(n.negates(start, end) for n in negations(sentence))


__all__ = ["BACKWARD", "FORWARD", "OTHER", "TERMINATE", "Negation", "is_negated", "negations"]
