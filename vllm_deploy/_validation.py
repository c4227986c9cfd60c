"""Helpers every module that checks inventory inputs shares (instances, multinode, gateway, waves,
vllm_args): what Ansible hands over made plain, an integer that is not a boolean, a value described in
our own words, the closest known name, and the problem lines themselves."""

from __future__ import annotations

import difflib
import re
from typing import Any


class _Problems:
    """The problems found so far, in the order found, each one line: `WHERE VAR: PROBLEM — FIX`."""

    def __init__(self, where: str = "") -> None:
        self.where = where
        self.lines: list[str] = []

    def err(self, var: str, problem: str, fix: str) -> None:
        """Record one problem with the variable `var` and how to fix it."""
        self.lines.append(f"{self.where}{var}: {problem} — {fix}")


def _is_int(value: Any) -> bool:
    """An integer, and not a boolean (YAML's yes/no/true/false are ints to Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_gpu_ref(value: Any) -> bool:
    """A GPU as the inventory may pin it: an index, or a GPU or MIG UUID."""
    return (_is_int(value) and value >= 0) or (
        isinstance(value, str) and re.fullmatch(r"(GPU|MIG)-[A-Za-z0-9/-]+", value) is not None)


def _plain(value: Any) -> Any:
    """Builtin types for whatever Ansible passes (its tagged str/dict/list subclasses), recursively."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def _closest(name: str, names: Any) -> str | None:
    """The known name `name` is most likely a typo of, or None when none is close."""
    hits = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return hits[0] if hits else None


def _type_name(value: Any) -> str:
    """Our own words for a value's type (never an Ansible-internal class name)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    return "value of another kind"


def _describe(value: Any) -> str:
    """A value as a problem line shows it: its type in our words, then its repr."""
    return f"{_type_name(value)} {value!r}"
