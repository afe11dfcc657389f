"""The `layerprobe` command line: options in, one library call, a rich summary out."""

from layerprobe.cli.app import app

__all__ = [
    "app",
]
