"""Reading text: the analyzer (tokens, stemming, stopwords), sentences, de-identification placeholders, negation,
the aspect vocabulary and the BM25 formula. The lowest floor: it imports nothing of capr but its errors."""
