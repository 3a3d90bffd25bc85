"""User data never blocks or crashes the scan: FIFOs, devices, symlinks, odd content, huge files, slow dirs.

The controller runs the scan as root over directories users control (issue 10 item 3)."""
from __future__ import annotations

import json
import os
import threading

import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from slurm_ft.cli.group import cli
from slurm_ft.job import ckpt
from slurm_ft.job.layouts import deepspeed, marker, megatron


def scan(d, timeout=10.0, **kw):
    """ckpt.latest in a thread: a scan that blocks fails the test instead of hanging it."""
    out = []
    t = threading.Thread(target=lambda: out.append(ckpt.latest(str(d), **kw)), daemon=True)
    t.start()
    t.join(timeout)
    assert out, f"ckpt.latest({d}) blocked for {timeout} s"
    return out[0]


@pytest.mark.parametrize("name", ["latest", "latest_checkpointed_iteration.txt"])
def test_fifo_tracker_never_blocks(tmp_path, name):
    ckpt.write_checkpoint(str(tmp_path), 5, {"a": b"x"})
    os.mkfifo(tmp_path / name)               # nobody ever writes to it: a blocking open would wait forever
    r = scan(tmp_path)
    assert r.step == 5
    assert any(s.path.endswith(name) and s.verdict == "unreadable" and "not a regular file" in s.reason
               for s in r.skipped)


@pytest.mark.parametrize("inside", ["COMPLETE", ".metadata"])
def test_fifo_or_device_inside_a_candidate_is_unreadable(tmp_path, inside):
    ckpt.write_checkpoint(str(tmp_path), 5, {"a": b"x"})
    bad = tmp_path / "step_000009"
    bad.mkdir()
    os.mkfifo(bad / inside)
    r = scan(tmp_path)
    assert r.step == 5 and r.skipped[0].path == str(bad)


def test_symlink_to_dev_zero_is_not_read(tmp_path):
    ckpt.write_checkpoint(str(tmp_path), 5, {"a": b"x"})
    os.symlink("/dev/zero", tmp_path / "latest")
    bad = tmp_path / "step_000009"
    bad.mkdir()
    os.symlink("/dev/zero", bad / "COMPLETE")
    os.symlink("/etc", tmp_path / "step_000010")          # a directory link out of DIR: not followed
    r = scan(tmp_path)
    assert r.step == 5
    why = {s.path: (s.verdict, s.reason) for s in r.skipped}
    assert why[str(tmp_path / "latest")][0] == "unreadable"
    assert why[str(bad)][0] == "unreadable" and "symlink" in why[str(bad)][1]
    assert "not followed" in why[str(tmp_path / "step_000010")][1]


def test_a_huge_manifest_is_capped_not_read(tmp_path):
    ckpt.write_checkpoint(str(tmp_path), 5, {"a": b"x"})
    bad = tmp_path / "step_000009"
    bad.mkdir()
    with open(bad / "COMPLETE", "wb") as fh:
        fh.truncate(2 << 30)                                # 2 GiB sparse: costs nothing on disk
    r = scan(tmp_path)
    assert r.step == 5 and "larger than" in r.skipped[0].reason


def test_the_whole_scan_has_a_deadline(tmp_path):
    for s in range(3):
        ckpt.write_checkpoint(str(tmp_path), s, {"a": b"x"})
    r = scan(tmp_path, deadline_s=0.0)
    assert r.path is None and r.error and r.must_not_start and "took longer" in r.reason


@pytest.mark.parametrize("layout,files,needle", [
    ("megatron", {"latest_checkpointed_iteration.txt": "²".encode()}, "tracker is unreadable"),
    ("slurm-ft", {"step_000009/COMPLETE": b'{"format": "slurm-ft-ckpt", "step": 1e999, "files": {}}'}, "no valid step"),
    ("slurm-ft", {"step_000009/COMPLETE": b"[" * 200_000}, "unreadable"),
    ("hf", {"checkpoint-9/trainer_state.json": b'{"global_step": 1e999}', "checkpoint-9/model.bin": b"w"}, "global_step"),
    ("hf", {"checkpoint-9/trainer_state.json": b"[" * 200_000, "checkpoint-9/model.bin": b"w"}, "unreadable"),
    ("deepspeed", {"latest": b"\xff\xfe../x"}, "tracker is unreadable"),
])
def test_odd_content_is_a_bad_candidate_not_an_exception(tmp_path, layout, files, needle):
    ckpt.write_checkpoint(str(tmp_path), 5, {"a": b"x"})
    for rel, data in files.items():
        p = tmp_path / rel
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(data)
    r = scan(tmp_path)
    assert r.step == 5 and not r.error
    assert any(needle in s.reason for s in r.skipped), r.skipped
    res = CliRunner().invoke(cli, ["ckpt", "latest", "--json", str(tmp_path)])
    assert res.exit_code == 0 and json.loads(res.stdout)["step"] == 5 and res.exception is None


def test_refuse_is_exit_4_and_the_starter_does_not_start(tmp_path, monkeypatch):
    from slurm_ft.job import jobstart
    (tmp_path / "step_7").mkdir()
    (tmp_path / "step_7" / "__0_0.distcp").write_bytes(b"shard")     # a save that never finished
    res = CliRunner().invoke(cli, ["ckpt", "latest", str(tmp_path)])
    assert res.exit_code == 4 and "not starting from scratch" in res.output
    execs = []
    monkeypatch.setattr(jobstart.os, "execvp", lambda *a: execs.append(a))
    assert jobstart.main(["--ckpt-dir", str(tmp_path), "--", "/bin/echo", "{ckpt}"]) == 4
    assert execs == []


# --- the parsers of foreign bytes, under hypothesis ------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_megatron_tracker_parser_total(raw):
    target, step, why = megatron.parse_tracker(raw)
    if why:
        assert target is None and step is None
    elif target != "release":
        assert step is not None and step >= 0 and target == f"iter_{step:07d}"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_deepspeed_tracker_parser_total(raw):
    tag, why = deepspeed.parse_tracker(raw)
    assert (tag is None) == bool(why)
    if tag is not None:
        assert "/" not in tag and tag not in (".", "..") and tag.strip() == tag


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
                           max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=300), json_values.map(lambda v: json.dumps(v).encode()),
                 st.fixed_dictionaries({"format": st.just("slurm-ft-ckpt"), "step": json_values,
                                        "files": json_values}).map(lambda v: json.dumps(v).encode())))
def test_manifest_parser_total(raw):
    manifest, why = marker.parse_manifest(raw)
    if manifest is None:
        assert why
    else:
        assert type(manifest["step"]) is int and manifest["step"] >= 0 and isinstance(manifest["files"], dict)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["COMPLETE", "latest", "latest_checkpointed_iteration.txt",
                                        "step_000009/COMPLETE", "step_000009/a", "iter_0000009/mp_rank_00/m.pt",
                                        "checkpoint-9/trainer_state.json", "step_9/.metadata",
                                        "step_9/__0_0.distcp", "global_step9/x_model_states.pt", "last.ckpt"]),
                       st.binary(max_size=64), max_size=6))
def test_scan_never_raises_on_any_bytes(files):
    """Any bytes in any file a layout reads: an answer (maybe refuse), never an exception."""
    from test_ckpt import MemFS
    fs = MemFS({"/c/" + k: v for k, v in files.items()} or {"/c/x": b""})
    r = ckpt.latest("/c", fs, verify=True)
    assert r.path is None or r.path.startswith("/c")
    assert not (r.path and r.refuse)


def test_a_step_directory_swapped_for_a_symlink_after_the_listing_is_not_read_through(tmp_path):
    """Finding 17: O_NOFOLLOW guarded the last component only. A step directory listed as a directory,
    then swapped for a symlink before its files are read, made root read COMPLETE (and, with verify, hash
    the files a manifest names) in a directory the user pointed at. (The scan's verdict came out right
    before too, as the step's own listing was guarded; the reads under it were not.)"""
    from slurm_ft.job.ckptfs import LocalFS
    root, elsewhere = tmp_path / "ckpt", tmp_path / "elsewhere"
    ckpt.write_checkpoint(str(root), 5, {"a": b"x"})
    ckpt.write_checkpoint(str(elsewhere), 9, {"a": b"y"})        # complete, but not in the job's directory
    (root / "step_000009").mkdir()                               # what the listing sees: an empty step dir

    class Swapping(LocalFS):
        def list(self, path):
            got = super().list(path)
            if path == str(root) and (root / "step_000009").is_dir() and not (root / "step_000009").is_symlink():
                (root / "step_000009").rmdir()                   # the user's swap, between list and read
                os.symlink(elsewhere / "step_000009", root / "step_000009")
            return got

    r = ckpt.latest(str(root), fs=Swapping(root=str(root)), verify=True)
    assert r.step == 5 and r.path == str(root / "step_000005")
    # the same through the filesystem calls themselves: nothing below the root is followed
    fs = LocalFS(root=str(root))
    assert fs.read(str(root / "step_000009" / "COMPLETE")) is None
    assert fs.list(str(root / "step_000009")) is None and fs.sha256(str(root / "step_000009" / "a")) is None
    # the root itself may be a link (/ckpt -> /lustre/...)
    os.symlink(root, tmp_path / "link")
    assert ckpt.latest(str(tmp_path / "link")).step == 5
