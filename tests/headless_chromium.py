"""A headless chromium for the report's browser tests: the DOM after scripts ran, screenshots, print to PDF.

Debian's `chromium` package (`.ci/run` installs it) is used directly, no driver: each call starts a
fresh browser with a throwaway profile and every network-facing feature off, loads the page from disk
and exits. `LAYERPROBE_CHROMIUM` names another binary.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-extensions",
)
WIDTH = 1280


def find_chromium() -> str | None:
    """The browser binary: $LAYERPROBE_CHROMIUM, else chromium (Debian), chromium-browser or google-chrome."""
    named = os.environ.get("LAYERPROBE_CHROMIUM")
    if named:
        return shutil.which(named) or (named if Path(named).is_file() else None)
    return next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)


def run(binary: str, page: Path, *args: str, height: int = 2000) -> str:
    """Open `page` at WIDTH × `height` with `args`; return stdout (the DOM for --dump-dom)."""
    with tempfile.TemporaryDirectory(prefix="layerprobe-chromium-") as profile:
        done = subprocess.run(
            [
                binary,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={WIDTH},{height}",
                *args,
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def dump_dom(binary: str, page: Path) -> str:
    """The serialised DOM once the page loaded and its scripts ran (a virtual-time budget lets them finish)."""
    return run(binary, page, "--dump-dom", "--virtual-time-budget=3000")


def screenshot(binary: str, page: Path, png: Path, height: int = 2000) -> Path:
    run(binary, page, "--hide-scrollbars", f"--screenshot={png}", height=height)
    return png


def print_pdf(binary: str, page: Path, pdf: Path) -> Path:
    run(binary, page, "--no-pdf-header-footer", f"--print-to-pdf={pdf}")
    return pdf
