"""The chat prompt's line editing and history: GNU readline's (arrow keys, up-arrow recall,
Ctrl-R search) when the input is a terminal, with the history kept in a file between runs;
click's plain prompt when it is not (a pipe, a script, the tests' runner).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from types import ModuleType

import click

# Lines kept in the history file.
HISTORY_LINES = 1000
# Readline counts every character of the prompt as a column unless the escape sequences of
# its colours are marked as invisible (\001 ... \002).
_ESCAPES = re.compile(r"(\x1b\[[0-9;]*m)")


def _readline() -> ModuleType | None:
    if not sys.stdin.isatty():
        return None
    try:
        import readline
    except ImportError:  # a Python built without it: plain input, no history
        return None
    return readline


class Lines:
    """`history`: the file the lines are read from and appended to; None keeps them for this
    session only (`ragd chat --no-store`)."""

    def __init__(self, history: Path | None) -> None:
        self.history = history
        self._readline = _readline()
        self._known = 0
        if self._readline is None:
            return
        self._readline.clear_history()
        self._readline.set_history_length(HISTORY_LINES)
        if history is not None and history.exists():
            with contextlib.suppress(OSError):
                self._readline.read_history_file(str(history))
        self._known = self._readline.get_current_history_length()

    @property
    def editing(self) -> bool:
        return self._readline is not None

    def read(self, prompt: str) -> str:
        """One line; EOFError on Ctrl-D, KeyboardInterrupt or click.Abort on Ctrl-C."""
        if self._readline is None:
            text: str = click.prompt(prompt, prompt_suffix="", show_default=False)
            return text
        return input(_ESCAPES.sub("\x01\\1\x02", prompt))

    def save(self) -> None:
        """Appends this session's lines to the history file, owner-only (it holds what was
        typed): appended, so two sessions at once both keep theirs; readline trims the file
        to the last HISTORY_LINES."""
        if self._readline is None or self.history is None:
            return
        added = self._readline.get_current_history_length() - self._known
        if added <= 0:
            return
        self.history.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not self.history.exists():
            os.close(os.open(self.history, os.O_CREAT | os.O_WRONLY, 0o600))
        self._readline.append_history_file(added, str(self.history))
        self._known += added
