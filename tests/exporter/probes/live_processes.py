"""The processes of this machine that a test started, found by a word of their argv in /proc."""

from __future__ import annotations

import os
from pathlib import Path


def with_argv_word(word: str) -> list[int]:
    """Live (not zombie) processes that have `word` as one of their argv words."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{name}/stat").read_bytes().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if word.encode() in argv and state != b"Z":
            found.append(int(name))
    return found
