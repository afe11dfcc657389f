"""One pass over a corpus, measured: the angular-distance matrix and the depth diagnostics."""
