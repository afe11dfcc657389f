"""Pure statistics (numpy/scipy only): paired differences, bootstraps, rank correlations."""
