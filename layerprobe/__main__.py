"""`python -m layerprobe` runs the command line."""

from layerprobe.cli import app

if __name__ == "__main__":
    app()
