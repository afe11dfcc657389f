"""The ground floor: errors, frozen option specs with every default, progress events, provenance, process ranks."""
