"""A cheap test that rules out, for most kernel-log lines, every pattern at once.

Almost every kernel-log record is chatter that no pattern matches, and trying ~25 regexes on each
costs ~8 us a record. Each pattern, though, can only match a text that contains one of a few
literal strings (`NVRM: Xid (` for the Xid pattern): those are read from the compiled regex's
parse tree. One regex searching for all of them at once (a gate) then settles most records in
one scan. The gate is a necessary condition only: a record that passes is still tried against
every pattern in order, so the first pattern that matches is the same with or without it.

Any construct not understood (case-insensitive patterns, or a Python whose regex internals
differ) means no literals for that pattern, and then no gate at all: slower, never different.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Sequence
from typing import Any

try:  # CPython's regex parser (sre_parse before 3.11): internal, so its absence is allowed for
    _PARSER: Any = importlib.import_module("re._parser")
    _C: Any = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - other interpreters
    _PARSER = _C = None

# Anchors are cut to start at a character that is rare in kernel text (not a lower-case letter,
# digit or space), so the gate's first-character scan skips most positions of a record.
_ANCHOR_MAX = 12


def _rare(ch: str) -> bool:
    return not (ch.islower() or ch.isspace() or ch.isdigit())


def _anchor(literal: str) -> str:
    """The substring of `literal` the gate searches for (any substring of a required literal is required)."""
    for i, ch in enumerate(literal):
        if _rare(ch) and len(literal) - i >= 3:
            return literal[i:i + _ANCHOR_MAX]
    return literal[:_ANCHOR_MAX]


def _cost(literals: frozenset[str]) -> tuple[int, int, int]:
    """Lower is better: anchors too short or with a common first character, then more alternatives, then shorter."""
    anchors = [_anchor(s) for s in literals]
    return sum(len(a) < 3 or not _rare(a[0]) for a in anchors), len(anchors), -min(len(a) for a in anchors)


def _pick(candidates: list[frozenset[str]]) -> frozenset[str] | None:
    return min(candidates, key=_cost) if candidates else None


def _candidates(items: Any) -> list[frozenset[str]]:
    """Sets of literals, each set such that every match contains at least one of its strings."""
    found: list[frozenset[str]] = []
    run: list[str] = []

    def end_run() -> None:
        if run:
            found.append(frozenset({"".join(run)}))
            run.clear()

    for op, av in items:
        if op is _C.LITERAL:
            run.append(chr(av))
            continue
        end_run()
        if op is _C.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            if not add_flags and not del_flags:  # (?i:...) and friends: not understood, skipped
                found.extend(_candidates(sub))
        elif op is _C.BRANCH:
            alternatives = [_pick(_candidates(alt)) for alt in av[1]]
            if all(a is not None for a in alternatives):
                found.append(frozenset().union(*(a for a in alternatives if a is not None)))
        elif op in (_C.MAX_REPEAT, _C.MIN_REPEAT, _C.POSSESSIVE_REPEAT):
            low, _high, sub = av
            if low >= 1:
                found.extend(_candidates(sub))
        elif op is _C.ATOMIC_GROUP:
            found.extend(_candidates(av))
        # anything else (classes, anchors, lookarounds, backreferences) requires no literal
    end_run()
    return found


def required_literals(regex: re.Pattern[str]) -> frozenset[str] | None:
    """Strings of which every text that `regex.search` matches contains at least one; None if unknown."""
    if _PARSER is None or regex.flags & re.IGNORECASE:
        return None
    try:
        return _pick(_candidates(_PARSER.parse(regex.pattern, regex.flags)))
    except Exception:  # an internal API that changed: fall back to no prefilter
        return None


def _trie_regex(words: Iterable[str]) -> str:
    """An alternation of `words` factored by common prefix, so a failed try costs one character."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        if "" in node:  # this word ends here: any longer word through it adds nothing to the gate
            return ""
        branches = [re.escape(ch) + emit(child) for ch, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return emit(trie)


def gate(literal_sets: Sequence[frozenset[str] | None]) -> re.Pattern[str] | None:
    """A regex that finds something in every text any of the patterns could match; None if one is unknown."""
    if not literal_sets or any(s is None for s in literal_sets):
        return None
    anchors = {_anchor(literal) for literals in literal_sets if literals is not None for literal in literals}
    return re.compile(_trie_regex(anchors))
