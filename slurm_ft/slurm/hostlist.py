"""Slurm hostlist expressions: `gpu[001-064,070]` <-> a list of names. Pure and fast.

Supported: several comma-separated elements with different prefixes (`gpu[01-02],cpu7`), zero padding
kept as written, several ranges in one bracket, a suffix after the bracket (`gpu[01-02]-ib`) and
several brackets in one element (`rack[1-2]-n[01-02]`, expanded as their product, left first).
"""
from __future__ import annotations

import re
from itertools import groupby
from typing import Iterable, List, Tuple

from slurm_ft.errors import UsageError

MAX_NAMES = 1_000_000  # a typo like gpu[1-999999999] must fail fast, not eat the memory
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+\Z")
_RANGE_RE = re.compile(r"(\d+)(?:-(\d+))?\Z")
_TAIL_NUM_RE = re.compile(r"^(.*?)(\d+)(\D*)\Z")


def expand(expr: str) -> List[str]:
    """All names of a hostlist expression in the order written; an empty expression -> []."""
    if not isinstance(expr, str):
        raise UsageError(f"hostlist must be a string, not {type(expr).__name__}")
    text = expr.strip()
    if not text or text == "(null)":
        return []
    out: List[str] = []
    for element in _split_top(text, expr):
        names = _expand_element(element, expr)
        out.extend(names)
        if len(out) > MAX_NAMES:
            raise UsageError(f"hostlist {expr!r} expands to more than {MAX_NAMES} names")
    return out


def _split_top(text: str, expr: str) -> List[str]:
    """Split on commas outside brackets; unbalanced brackets and empty elements are errors."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise UsageError(f"malformed hostlist {expr!r}: nested '['")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"malformed hostlist {expr!r}: ']' without '['")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise UsageError(f"malformed hostlist {expr!r}: '[' without ']'")
    parts.append(text[start:])
    for p in parts:
        if not p.strip():
            raise UsageError(f"malformed hostlist {expr!r}: empty element")
    return [p.strip() for p in parts]


def _expand_element(element: str, expr: str) -> List[str]:
    open_at = element.find("[")
    if open_at < 0:
        _check_name(element, expr)
        return [element]
    close_at = element.index("]", open_at)
    prefix, body, rest = element[:open_at], element[open_at + 1:close_at], element[close_at + 1:]
    if prefix:
        _check_name(prefix, expr)
    numbers = _expand_ranges(body, expr)
    tails = _expand_element(rest, expr) if rest else [""]
    if len(numbers) * len(tails) > MAX_NAMES:
        raise UsageError(f"hostlist {expr!r} expands to more than {MAX_NAMES} names")
    return [f"{prefix}{n}{t}" for n in numbers for t in tails]


def _expand_ranges(body: str, expr: str) -> List[str]:
    out: List[str] = []
    for part in body.split(","):
        m = _RANGE_RE.match(part.strip())
        if not m:
            raise UsageError(f"malformed hostlist {expr!r}: bad range {part!r} (want N or N-M)")
        lo_s, hi_s = m.group(1), m.group(2)
        if hi_s is None:
            out.append(lo_s)
            continue
        lo, hi = int(lo_s), int(hi_s)
        if hi < lo:
            raise UsageError(f"malformed hostlist {expr!r}: range {part!r} goes backwards")
        if hi - lo + 1 > MAX_NAMES:
            raise UsageError(f"hostlist {expr!r} expands to more than {MAX_NAMES} names")
        width = len(lo_s) if len(lo_s) > 1 and lo_s.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return out


def _check_name(text: str, expr: str) -> None:
    if not _NAME_RE.match(text):
        raise UsageError(f"malformed hostlist {expr!r}: bad characters in {text!r}")


def compress(names: Iterable[str]) -> str:
    """The shortest usual form: `gpu[001-003,007],login1`. Duplicates dropped, numbers sorted."""
    parsed: List[Tuple[str, str, int, str]] = []
    plain: List[str] = []
    seen = set()
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        m = _TAIL_NUM_RE.match(name)
        if m is None or "[" in name or "," in name:
            if not name or "[" in name or "," in name:
                raise UsageError(f"cannot compress {name!r}: not a single host name")
            plain.append(name)
            continue
        parsed.append((m.group(1), m.group(3), int(m.group(2)), m.group(2)))
    parsed.sort(key=lambda t: (t[0], t[1], t[2], len(t[3])))
    pieces: List[str] = sorted(plain)
    for (prefix, suffix), group in groupby(parsed, key=lambda t: (t[0], t[1])):
        items = list(group)
        if len(items) == 1:
            pieces.append(f"{prefix}{items[0][3]}{suffix}")
            continue
        ranges = _runs([(n, digits) for _, _, n, digits in items])
        pieces.append(f"{prefix}[{','.join(ranges)}]{suffix}")
    return ",".join(pieces)


def _runs(numbers: List[Tuple[int, str]]) -> List[str]:
    """Consecutive numbers with a consistent padding become `lo-hi`."""
    out: List[str] = []
    first_n, first_d = numbers[0]
    last_n, last_d = numbers[0]
    width = len(first_d) if first_d.startswith("0") and len(first_d) > 1 else 0
    for n, d in numbers[1:]:
        if n == last_n + 1 and d == str(n).zfill(width):
            last_n, last_d = n, d
            continue
        out.append(first_d if first_n == last_n else f"{first_d}-{last_d}")
        first_n, first_d, last_n, last_d = n, d, n, d
        width = len(d) if d.startswith("0") and len(d) > 1 else 0
    out.append(first_d if first_n == last_n else f"{first_d}-{last_d}")
    return out
