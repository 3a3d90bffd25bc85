"""Helpers for the planning tests: run the CLI in-process, recompute printed arithmetic, exact Poisson."""
from __future__ import annotations

import math
import re
from decimal import Decimal, getcontext
from fractions import Fraction

import pytest

from slurm_ft.cli import main


def run_cli(capsys, *args, env_config=None):
    """(exit code, stdout, stderr) of `slurm-ft ARGS` run through the real entry point."""
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


_STEP = re.compile(r"^\s+(?P<label>[^:]+): (?P<sym>.+?) = (?P<numeric>[-0-9.,e×/()+ sqrt^]+?) = "
                   r"(?P<result>-?[0-9][0-9,]*(?:\.[0-9]+)?(?:e[-+][0-9]+)?)(?: |$)")


def _to_python(expr: str) -> str:
    expr = re.sub(r"(?<=\d),(?=\d{3})", "", expr)
    return expr.replace("×", "*").replace("^", "**")


def half_unit(shown: str) -> float:
    """Half a unit in the last digit shown: '7.759' -> 0.0005, '11,135' -> 0.5, '2.568e-09' -> 5e-13."""
    s = shown.replace(",", "")
    exp = 0
    if "e" in s:
        s, e = s.split("e")
        exp = int(e)
    decimals = len(s.split(".")[1]) if "." in s else 0
    return 0.5 * 10 ** (exp - decimals)


def check_printed_steps(text: str, minimum: int) -> int:
    """Every `label: formula = numbers = result` line: redo `numbers` and compare to the digits shown."""
    checked = 0
    for line in text.splitlines():
        m = _STEP.match(line)
        if not m:
            continue
        value = eval(_to_python(m["numeric"]), {"__builtins__": {}}, {"sqrt": math.sqrt})  # noqa: S307
        shown = m["result"]
        printed = float(shown.replace(",", ""))
        tol = half_unit(shown) * (1 + 1e-9) + 1e-12 * abs(value)
        assert abs(value - printed) <= tol, f"{line.strip()!r}: recomputed {value!r}, shown {shown}"
        checked += 1
    assert checked >= minimum, f"only {checked} worked steps found in:\n{text}"
    return checked


def exact_poisson_tail(lam: float, s: int) -> float:
    """P(N > s) = 1 - exp(-lam) * sum_{k<=s} lam^k / k!, with the sum in exact fractions and exp to 60 digits."""
    getcontext().prec = 60
    lam_f = Fraction(str(lam))
    total = Fraction(0)
    term = Fraction(1)
    for k in range(0, s + 1):
        if k:
            term = term * lam_f / k
        total += term
    e = (-Decimal(str(lam))).exp()
    cdf = e * (Decimal(total.numerator) / Decimal(total.denominator))
    return float(Decimal(1) - cdf)
