"""The one exception type users see.

Anything raised as `UserError` is bad input (an unknown env, a mistyped hyperparameter, a missing
run id, a corrupt archive file). The CLI prints its message on one line and exits with status 2;
it never shows a traceback for it. Everything else is a bug in backflip or in user code and keeps
its traceback.
"""

from __future__ import annotations

import difflib


class UserError(Exception):
    """Bad input: printed as `error: <message>` without a traceback."""


def did_you_mean(word: str, choices, n: int = 3) -> str:
    """' (did you mean X?)' for the closest matches of `word` in `choices`, or ''."""
    close = difflib.get_close_matches(word, list(choices), n=n, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


class NonFiniteError(RuntimeError):
    """A value became NaN or infinite in training (an observation, a reward, a logged loss): it
    stops the seed (unless doctor.stop_on_nan=false), which records the message as its error."""
