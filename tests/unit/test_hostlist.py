"""Hostlist expressions, as Slurm writes them (`scontrol show hostnames` agrees on these)."""
from __future__ import annotations

import random
import time

import pytest

from slurm_ft.errors import UsageError
from slurm_ft.slurm.hostlist import compress, expand


@pytest.mark.parametrize("expr, names", [
    ("gpu[001-003,007]", ["gpu001", "gpu002", "gpu003", "gpu007"]),
    ("gpu[001-064,070]", [f"gpu{i:03d}" for i in range(1, 65)] + ["gpu070"]),
    ("gpu5", ["gpu5"]),
    ("gpu[8-11]", ["gpu8", "gpu9", "gpu10", "gpu11"]),
    ("gpu[098-101]", ["gpu098", "gpu099", "gpu100", "gpu101"]),
    ("gpu[01-02],cpu7,login", ["gpu01", "gpu02", "cpu7", "login"]),
    ("gpu[01-02]-ib", ["gpu01-ib", "gpu02-ib"]),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("node-a.b[3]", ["node-a.b3"]),
    (" gpu[1-2] ", ["gpu1", "gpu2"]),
    ("", []),
    ("(null)", []),
])
def test_expand(expr, names):
    assert expand(expr) == names


@pytest.mark.parametrize("bad, why", [
    ("gpu[1-", "'\\[' without '\\]'"),
    ("gpu1]", "'\\]' without '\\['"),
    ("gpu[3-1]", "goes backwards"),
    ("gpu[a-b]", "bad range"),
    ("gpu[]", "bad range"),
    ("gpu[1-2,]", "bad range"),
    ("a,,b", "empty element"),
    ("gp u1", "bad characters"),
    ("gpu[[1]]", "nested"),
    ("gpu[1-99999999]", "more than"),
    ("gpu;rm", "bad characters"),
])
def test_malformed_names_the_expression(bad, why):
    with pytest.raises(UsageError, match=why) as info:
        expand(bad)
    assert repr(bad) in str(info.value) or "expands to more" in str(info.value)


@pytest.mark.parametrize("names, expr", [
    (["gpu001", "gpu002", "gpu003", "gpu007"], "gpu[001-003,007]"),
    (["gpu003", "gpu001", "gpu002"], "gpu[001-003]"),
    (["gpu001"], "gpu001"),
    (["gpu8", "gpu9", "gpu10"], "gpu[8-10]"),
    (["gpu099", "gpu100"], "gpu[099-100]"),
    (["gpu01", "gpu1"], "gpu[1,01]"),
    (["gpu01-ib", "gpu02-ib", "gpu01"], "gpu01,gpu[01-02]-ib"),
    (["login", "gpu1", "gpu2", "cpu3"], "login,cpu3,gpu[1-2]"),
    (["gpu1", "gpu1"], "gpu1"),
    ([], ""),
])
def test_compress(names, expr):
    assert compress(names) == expr


def test_roundtrip_random_sets():
    rng = random.Random(7)
    for _ in range(200):
        names = sorted({f"gpu{rng.randint(1, 300):03d}" for _ in range(rng.randint(1, 60))})
        assert sorted(expand(compress(names))) == names


def test_compress_refuses_expressions():
    with pytest.raises(UsageError):
        compress(["gpu[1-2]"])


def test_64k_names_fast():
    names = [f"n{i:05d}" for i in range(65536)]
    t0 = time.process_time()            # CPU time: a loaded shared box must not fail this
    expr = compress(names)
    back = expand(expr)
    elapsed = time.process_time() - t0
    assert expr == "n[00000-65535]" and back == names
    assert elapsed < 1.0, f"{elapsed:.2f} s"
