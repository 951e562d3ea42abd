"""Character spans: (start, end) offsets into a text."""

Span = tuple[int, int]
