"""The "did you mean" of error messages: the closest of the names a mistyped one could have meant."""

from __future__ import annotations

import difflib
from typing import Iterable


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``choices`` to ``word``; empty when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
