"""`python -m layerprobe` runs the command line."""

from layerprobe.cli.app import app

if __name__ == "__main__":
    app()
