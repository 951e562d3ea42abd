"""Which entity mentions may become labels: medspacy's ConText drops negated, hypothetical, family and
uncertain mentions ("no nausea or vomiting" must not label a passage with nausea)."""

from __future__ import annotations

from typing import Sequence

from capr.labels.gazetteer import Mention

# ConText attribute → reason recorded in the label statistics.
EXCLUDED = (("is_negated", "negated"), ("is_family", "family"), ("is_hypothetical", "hypothetical"),
            ("is_uncertain", "uncertain"))


class AssertionFilter:
    """Runs ConText on one sentence at a time, so a modifier never reaches into the next sentence."""

    def __init__(self) -> None:
        import medspacy

        self.nlp = medspacy.load(medspacy_enable=["medspacy_context"])
        self.context = self.nlp.get_pipe("medspacy_context")

    def reasons(self, sentence: str, mentions: Sequence[Mention], offset: int = 0) -> list[str | None]:
        """For each mention (offsets relative to `offset` in the sentence's source), None when the mention is
        affirmed, else why it cannot be a label."""
        if not mentions:
            return []
        from spacy.util import filter_spans

        doc = self.nlp.make_doc(sentence)
        for tok in doc:
            tok.is_sent_start = tok.i == 0
        spans = {}
        for k, m in enumerate(mentions):
            span = doc.char_span(m.start - offset, m.end - offset, label=m.kind, alignment_mode="expand")
            if span is not None:
                spans[k] = span
        kept = filter_spans(list(spans.values()))
        doc.ents = kept
        doc = self.context(doc)
        by_pos = {(e.start_char, e.end_char): e for e in doc.ents}
        out: list[str | None] = []
        for k in range(len(mentions)):
            span = spans.get(k)
            ent = by_pos.get((span.start_char, span.end_char)) if span is not None else None
            reason = None
            if ent is not None:
                reason = next((why for attr, why in EXCLUDED if getattr(ent._, attr)), None)
            out.append(reason)
        return out
