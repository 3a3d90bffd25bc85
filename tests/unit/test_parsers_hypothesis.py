"""Property-based tests for the parsers of data slurm-ft does not control: kernel log lines, `scontrol -o`
node records, hostlists, job tags and the config file (issue 10; job records: test_parse_untrusted.py)."""
from __future__ import annotations

import os
import re
import tempfile

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_ft.config import Config, load_config
from slurm_ft.errors import ConfigError, UsageError
from slurm_ft.gpu import kmsg
from slurm_ft.gpu import xid as catalog
from slurm_ft.gpu.sample import XidEvent
from slurm_ft.job import tag
from slurm_ft.slurm import parse
from slurm_ft.slurm.hostlist import compress, expand

BT = 1_764_400_000.0
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

LINE_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=200)
PCI = st.tuples(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F)).map(
    lambda t: f"{t[0]:04x}:{t[1]:02x}:{t[2]:02x}")
CODE = st.integers(1, 999)
DETAIL = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=60)
KERNEL_PREFIX = st.sampled_from(["", "4,17,5000000,-;", "[ 8123.456789] ", "Nov 29 03:12:45 gpu017 kernel: ",
                                 "2026-11-29T03:12:45+00:00 gpu017 kernel: ", "[Sun Nov 29 03:12:45 2026] "])
USER_TAG = st.from_regex(r"[a-z][a-z0-9_-]{0,12}", fullmatch=True).filter(lambda t: t != "kernel")


@SETTINGS
@given(st.lists(LINE_TEXT, max_size=20))
def test_any_lines_parse_without_error(lines):
    for e in kmsg.parse_lines(lines, boot_time=BT, sxid=True, now=BT + 1e6):
        assert e.kind in ("xid", "fallen_off_bus", "sxid", "forged")
        catalog.verdict(e)


@SETTINGS
@given(KERNEL_PREFIX, PCI, CODE, DETAIL)
def test_a_kernel_xid_line_reads_exactly(prefix, pci, code, detail):
    line = f"{prefix}NVRM: Xid (PCI:{pci}): {code}, {detail}"
    (e,) = kmsg.parse_lines([line], boot_time=BT, now=BT + 1e6)
    assert (e.kind, e.xid, e.pci_bus_id) == ("xid", code, pci)
    assert e.trusted is (" kernel: " not in prefix)          # a syslog line may be logger's (issue 22)


@SETTINGS
@given(USER_TAG, LINE_TEXT, PCI, CODE)
def test_no_syslog_line_of_another_program_drains(tag_, before, pci, code):
    line = f"Nov 30 01:02:03 node01 {tag_}: {before}NVRM: Xid (PCI:{pci}): {code}, pid=1, x"
    assert not any(catalog.verdict(e).drains for e in kmsg.parse_lines([line], boot_time=BT))


@SETTINGS
@given(st.sampled_from(["Nov 30 01:02:03 node01 ", "2026-11-30T01:02:03+00:00 node01 ",
                        "Nov 30 01:02:03.123456 node01 "]), st.sampled_from(["kernel", "kernel[4242]", "kernel[1]"]),
       LINE_TEXT, PCI, CODE)
def test_no_syslog_line_drains_whatever_its_tag(prefix, tag_, before, pci, code):
    """`logger -t kernel` writes what a syslog file shows for the kernel: no such line drains alone."""
    line = f"{prefix}{tag_}: {before}NVRM: Xid (PCI:{pci}): {code}, pid=1, x"
    events = kmsg.parse_lines([line], boot_time=BT, now=BT + 1e6)
    assert not any(catalog.verdict(e).drains for e in events)
    assert all(e.kind == "forged" for e in events) if "[" in tag_ else True


@SETTINGS
@given(st.integers(1, 23), st.integers(0, 7), st.integers(0, 2**32), LINE_TEXT, PCI)
def test_no_kmsg_record_outside_the_kernel_facility_drains(facility, level, seq, before, pci):
    line = f"{facility << 3 | level},{seq},5000000,-;{before}NVRM: Xid (PCI:{pci}): 79, pid=1, x"
    assert not any(catalog.verdict(e).drains for e in kmsg.parse_lines([line], boot_time=BT))


@SETTINGS
@given(st.sampled_from(["Jan", "Feb", "Mar", "Jun", "Nov", "Dec"]), st.integers(1, 28), st.integers(0, 23),
       st.floats(BT, BT + 5 * 365 * 86400))
def test_a_yearless_syslog_time_is_never_in_the_future(month, day, hour, now):
    line = f"{month} {day:2d} {hour:02d}:00:00 h kernel: NVRM: Xid (PCI:0000:01:00): 79, x"
    (e,) = kmsg.parse_lines([line], boot_time=BT, now=now)
    assert e.timestamp is not None and e.timestamp <= now + kmsg.FUTURE_SKEW_S
    assert e.timestamp > now - 367 * 86400


@SETTINGS
@given(st.integers(144, 150), DETAIL, DETAIL)
def test_an_nvlink5_line_drains_exactly_when_its_first_severity_word_is_fatal(code, before, after):
    # the first whole word Fatal or Nonfatal decides, wherever it stands and whatever surrounds it
    detail = f"{before} Fatal {after}"
    words = [w for w in re.findall(r"\w+", detail) if w in ("Fatal", "Nonfatal")]
    v = catalog.verdict(XidEvent(xid=code, detail=detail))
    assert v.drains == (words[0] == "Fatal") and v.action == ("reset_gpu" if v.drains else "none")


@SETTINGS
@given(st.text(max_size=300))
def test_any_text_is_nodes_or_a_value_error(text):
    try:
        nodes = parse.parse_nodes_kv(text)
    except (ValueError, UsageError):
        return
    assert all(isinstance(n.name, str) for n in nodes)


NAME = st.tuples(st.sampled_from(["gpu", "node-a", "x", "h100n"]), st.integers(0, 2000),
                 st.sampled_from(["", "-ib", "b"])).map(lambda t: f"{t[0]}{t[1]}{t[2]}")


@SETTINGS
@given(st.lists(NAME, max_size=30))
def test_hostlist_compress_then_expand_gives_the_names(names):
    assert sorted(expand(compress(names))) == sorted(set(names))


@SETTINGS
@given(st.text(alphabet="gpu0123456789[]-,: x", max_size=40))
def test_any_hostlist_text_expands_or_is_a_usage_error(text):
    try:
        names = expand(text)
    except UsageError:
        return
    assert all(n and "[" not in n and "," not in n for n in names)


@SETTINGS
@given(st.text(max_size=200))
def test_any_comment_is_a_tag_or_none(comment):
    spec = tag.decode(comment)
    assert spec is None or isinstance(spec, tag.FtSpec)


@SETTINGS
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60),
       st.one_of(st.none(), st.integers(1, 10**6)), st.integers(0, 10**6))
def test_every_tag_decodes_to_what_was_encoded(ckpt, min_nodes, max_restarts):
    spec = tag.FtSpec(ckpt_dir=ckpt, min_nodes=min_nodes, max_restarts=max_restarts)
    assert tag.decode(tag.encode(spec)) == spec


SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True),
                   st.text(max_size=20))
KEYS = st.sampled_from(["health", "controller", "lifecycle", "planning", "slurm", "state_dir", "deadline_s",
                        "quick", "validate_levels", "breaker_max_share", "kmsg_path", "levels", "node_types",
                        "gpus", "timeout_s", "target", "bogus"])
YAML_VALUE = st.recursive(SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(KEYS, inner, max_size=4)), max_leaves=12)


@SETTINGS
@given(st.dictionaries(KEYS, YAML_VALUE, max_size=5))
def test_any_config_mapping_loads_or_is_a_config_error(data):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "c.yaml")
        with open(p, "w") as fh:
            yaml.safe_dump(data, fh)
        os.chmod(d, 0o700)
        try:
            cfg = load_config(p)
        except ConfigError:
            return
    assert isinstance(cfg, Config)


@SETTINGS
@given(st.text(max_size=300))
def test_any_config_text_loads_or_is_a_config_error(text):
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "c.yaml")
        with open(p, "w") as fh:
            fh.write(text)
        try:
            load_config(p)
        except ConfigError:
            pass


@SETTINGS
@given(st.integers(1, 10**9), st.lists(st.integers(0, 10**6), max_size=8), st.lists(DETAIL, max_size=8),
       st.lists(st.text(max_size=40), max_size=8), st.randoms())
def test_squeue_steps_give_the_jobs_numbered_steps_and_nothing_else(job, steps, noise, names, rnd):
    named = {s: (names[i] if i < len(names) else "python") for i, s in enumerate(steps)}
    where = {s: f"gpu[{s % 7:03d}-{s % 7 + 1:03d}]" for s in steps}      # each step on two nodes
    lines = [f"{job}.{s} {where[s]} {named[s]}" for s in steps] + [
        f"{job}.batch gpu000 batch", f"{job}.extern gpu[000-009] extern", f"{job + 1}.7 gpu003 slurm-ft-group1",
        f"{job}.\u00b2 gpu003 x"] + [f"{job}.{x}" for x in noise]
    rnd.shuffle(lines)
    text = "\n".join(lines)
    got = parse.parse_step_ids(text, job)
    assert got == sorted(got) and set(steps) <= set(got)
    assert all(f"{job}.{s}" in (f"{job}.{x}".strip().partition(" ")[0] for x in noise) for s in set(got) - set(steps))
    # by name: a user's step names are compared whole; another job's step of that name is not this job's
    one = parse.parse_step_ids(text, job, "slurm-ft-group1")
    assert {s for s in steps if named[s].strip() == "slurm-ft-group1"} <= set(one) <= set(got)
    # by node: the steps on gpu003 (a nodelist Slurm compressed), never the batch or extern step there
    on = parse.parse_step_ids(text, job, on=["gpu003"])
    assert {s for s in steps if s % 7 in (2, 3)} <= set(on) <= set(got)
