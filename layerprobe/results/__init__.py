"""Typed result kinds, their validation at read time, atomic file I/O and the run directory's file names."""
