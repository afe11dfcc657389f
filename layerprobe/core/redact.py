"""Secrets never leave the process: a token given in `--model-args` or `HF_TOKEN` reaches no file or terminal.

A `--model-args` key named `token`, `password`, `api_key`, `secret` or ending in `_token`, `_key`,
`_password`, `_secret` holds a secret: results record it as `"<redacted>"` (so it is known that one was
given) and its value, with the values of `HF_TOKEN` / `HUGGING_FACE_HUB_TOKEN`, is remembered for this
process. Every file layerprobe writes (results/io.py) and everything the command line prints
(cli/console.py) passes through `scrub`, which replaces each remembered value wherever it appears, so a
secret that ends up somewhere unexpected (an error message quoting the option text, a path) is caught too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from layerprobe.core.defaults import MIN_SECRET_LENGTH, REDACTED, SECRET_ENV, SECRET_KEYS, SECRET_SUFFIXES

_REMEMBERED: set[str] = set()
# `key=value` or `key:value` inside --model-args text (also quoted, also inside braces), read before parsing.
_PAIR = re.compile(r"""['"]?([A-Za-z_][\w.-]*)['"]?\s*[=:]\s*['"]?([^,{}'"]*)""")


def is_secret_key(key: object) -> bool:
    """Whether a `--model-args` key names a secret (token, password, api_key, secret, *_token, *_key…)."""
    if not isinstance(key, str):
        return False
    name = key.strip().lower()
    return name in SECRET_KEYS or name.endswith(SECRET_SUFFIXES)


def redacted(args: Mapping[Any, Any]) -> dict[Any, Any]:
    """A copy of `args` with every secret's value (at any depth) replaced by `"<redacted>"`."""
    out: dict[Any, Any] = {}
    for key, value in args.items():
        if is_secret_key(key) and value is not None:
            out[key] = REDACTED
        elif isinstance(value, Mapping):
            out[key] = redacted(value)
        else:
            out[key] = value
    return out


def remember_secrets(args: Mapping[Any, Any]) -> None:
    """Remember the secret values of `args` (at any depth), so that `scrub` removes them from any text."""
    for key, value in args.items():
        if isinstance(value, Mapping):
            remember_secrets(value)
        elif is_secret_key(key) and isinstance(value, str):
            _remember(value)


def remember_secrets_in_text(text: str) -> None:
    """Remember the secret values of unparsed `k=v,k=v` text: its own error messages quote it."""
    for match in _PAIR.finditer(text):
        if is_secret_key(match.group(1)):
            _remember(match.group(2).strip())


def _remember(value: str) -> None:
    if len(value) >= MIN_SECRET_LENGTH:
        _REMEMBERED.add(value)


def known_secrets() -> list[str]:
    """Every secret this process knows of (remembered ones and the token variables' values), longest first."""
    found = set(_REMEMBERED)
    for name in SECRET_ENV:
        value = os.environ.get(name, "").strip()
        if len(value) >= MIN_SECRET_LENGTH:
            found.add(value)
    return sorted(found, key=len, reverse=True)


def scrub(text: str) -> str:
    """`text` with every known secret replaced by `"<redacted>"`."""
    for secret in known_secrets():
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text
