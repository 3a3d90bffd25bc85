"""Worked arithmetic: every number the planners give comes with the steps that produce it.

A step is shown as `label: symbols = numbers = result unit`. The numbers in a step are the values of
earlier steps *as displayed*, and its result is rounded the way it is displayed, so a person redoing any
single line on a calculator gets the digits printed. Display rule (`rnd`/`num`): four significant digits
below 1,000, whole numbers from 1,000 up, e-notation with four significant digits below 0.0001 and
from 1e15 up.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, TypeVar

_Num = TypeVar("_Num", int, float)     # an int stays an int: counts are shown whole


def rnd(x: _Num) -> _Num:
    """`x` rounded exactly as `num` prints it."""
    if isinstance(x, int) or x == 0 or not math.isfinite(x):
        return x
    if abs(x) < 1e-4 or abs(x) >= 1e15:
        return float(f"{x:.3e}")
    if abs(x) >= 1000:
        return float(round(x))
    digits = 3 - int(math.floor(math.log10(abs(x))))
    return round(x, digits)


def num(x: float) -> str:
    """Display form of a number (see module doc); ints print whole with thousands separators."""
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return f"{x:,}"
    if not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    if x == 0:
        return "0"
    if abs(x) >= 1e15:               # past a float's whole digits: 1e308 as 309 of them reads as nothing
        return f"{x:.3e}"
    if abs(x) >= 1000:
        return f"{round(x):,}"
    if abs(x) < 1e-4:
        return f"{x:.3e}"
    digits = 3 - int(math.floor(math.log10(abs(x))))
    return f"{x:.{max(digits, 0)}f}"


def gnum(x: float) -> str:
    """An input as given: no padding zeros (0.999, 54, 72.5), thousands separators."""
    if isinstance(x, bool) or isinstance(x, int) or not isinstance(x, float) or not math.isfinite(x):
        return num(x)
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:,.10g}"


def pct(x: float) -> str:
    """A fraction as a percentage, four significant digits (0.93312 -> '93.31%', 2.4e-05 -> '0.002400%')."""
    return f"{num(100 * x)}%"


@dataclass
class Term:
    name: str           # stable key, also the JSON key of the result
    label: str          # what it is, in words
    symbolic: str       # the formula in symbols, "" for a given input
    numeric: str        # the formula with the displayed numbers, "" for a given input
    value: float
    unit: str = ""
    note: str = ""      # where an input came from, or why a formula applies

    def line(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        parts = [f"{self.label}:"]
        if self.symbolic:
            parts.append(f"{self.symbolic} =")
        if self.numeric and self.numeric != num(self.value):
            parts.append(f"{self.numeric} =")
        shown = gnum(self.value) if not (self.symbolic or self.numeric) else num(self.value)
        parts.append(f"{shown}{unit}")
        text = " ".join(parts)
        return f"{text}   ({self.note})" if self.note else text

    def to_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "label": self.label, "formula": self.symbolic, "numbers": self.numeric,
                "value": self.value, "unit": self.unit, "note": self.note}


@dataclass
class Derivation:
    """An ordered list of inputs and worked steps, plus free-text lines (tables, conclusions)."""
    steps: List[Term] = field(default_factory=list)
    lines: List[Tuple[int, str]] = field(default_factory=list)   # (position in steps, text)

    def given(self, name: str, label: str, value: _Num, unit: str = "", note: str = "") -> _Num:
        """An input as the user gave it (or a documented default): shown, not derived."""
        self.steps.append(Term(name, label, "", "", value, unit, note))
        return value

    def step(self, name: str, label: str, symbolic: str, numeric: str, value: _Num,
             unit: str = "", note: str = "", exact: bool = False) -> _Num:
        """A derived value; returns it rounded as displayed so later steps build on what is shown."""
        shown = value if exact else rnd(value)
        self.steps.append(Term(name, label, symbolic, numeric, shown, unit, note))
        return shown

    def text(self, line: str) -> None:
        self.lines.append((len(self.steps), line))

    def value(self, name: str) -> Optional[float]:
        for s in self.steps:
            if s.name == name:
                return s.value
        return None

    def render(self, indent: str = "  ") -> List[str]:
        out: List[str] = []
        extra = list(self.lines)
        for i, s in enumerate(self.steps):
            while extra and extra[0][0] <= i:
                out.append(indent + extra.pop(0)[1])
            out.append(indent + s.line())
        out.extend(indent + t for _, t in extra)
        return out

    def to_list(self) -> List[Dict[str, Any]]:
        return [s.to_dict() for s in self.steps]
