"""`python -m layerprobe` runs the command line."""

from layerprobe.cli import app

app()
