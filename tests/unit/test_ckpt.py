"""The checkpoint contract: newest complete checkpoint per layout, half-written ones skipped with a reason."""
from __future__ import annotations

import hashlib
import json
import os
import posixpath

import pytest
from click.testing import CliRunner

from slurm_ft.cli.group import cli
from slurm_ft.job import ckpt
from slurm_ft.job.ckpt import FS, Entry


class MemFS(FS):
    """A directory tree in a dict: path -> bytes (file) or None (directory); links: path -> target."""

    def __init__(self, files: dict, links: dict | None = None):
        self.files = {}
        for path, data in files.items():
            self.files[path] = data
            parent = posixpath.dirname(path)
            while parent not in ("/", ""):
                self.files.setdefault(parent, None)
                parent = posixpath.dirname(parent)
        self.links = links or {}

    def list(self, path):
        if self.files.get(path, b"") is not None:      # missing, or a file
            return None
        out = []
        for p, data in self.files.items():
            if posixpath.dirname(p) == path:
                out.append(Entry(posixpath.basename(p), data is None, 0 if data is None else len(data),
                                 self.links.get(p)))
        return out

    def read(self, path, limit=1 << 20):
        data = self.files.get(path)
        return None if data is None else data[:limit]

    def read_tail(self, path, n):
        data = self.files.get(path)
        return None if data is None else data[-n:]

    def sha256(self, path):
        data = self.files.get(path)
        return None if data is None else hashlib.sha256(data).hexdigest()


def marker(step, files, fmt=ckpt.FORMAT):
    return json.dumps({"format": fmt, "version": 1, "step": step,
                       "files": {n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                                 for n, d in files.items()}}).encode()


def ours(root, step, files, mark=True, marker_files=None):
    out = {f"{root}/step_{step:06d}/{n}": d for n, d in files.items()}
    if mark:
        out[f"{root}/step_{step:06d}/COMPLETE"] = marker(step, marker_files or files)
    return out


# --- slurm-ft layout ----------------------------------------------------------------------------

def test_newest_complete_of_our_layout():
    fs = MemFS({**ours("/c", 100, {"r0": b"aa"}), **ours("/c", 200, {"r0": b"bb", "r1": b"cc"})})
    r = ckpt.latest("/c", fs)
    assert (r.path, r.step, r.layout, r.skipped) == ("/c/step_000200", 200, "slurm-ft", ())


def test_missing_marker_is_skipped_and_previous_returned():
    fs = MemFS({**ours("/c", 100, {"r0": b"aa"}), **ours("/c", 200, {"r0": b"bb"}, mark=False)})
    r = ckpt.latest("/c", fs)
    assert r.path == "/c/step_000100" and r.step == 100
    assert [(s.path, s.step) for s in r.skipped] == [("/c/step_000200", 200)]
    assert "no layout's evidence" in r.skipped[0].reason and r.skipped[0].verdict == "incomplete"


def test_truncated_file_against_manifest_is_skipped():
    files = ours("/c", 200, {"r0": b"bbbb"})
    files["/c/step_000200/r0"] = b"bb"                 # shorter than the manifest says
    fs = MemFS({**ours("/c", 100, {"r0": b"aa"}), **files})
    r = ckpt.latest("/c", fs)
    assert r.step == 100
    assert "truncated" in r.skipped[0].reason and "r0" in r.skipped[0].reason


def test_file_named_in_manifest_but_missing():
    fs = MemFS({**ours("/c", 100, {"r0": b"aa"}),
                **ours("/c", 200, {"r0": b"bb"}, marker_files={"r0": b"bb", "r1": b"x"})})
    r = ckpt.latest("/c", fs)
    assert r.step == 100 and "r1" in r.skipped[0].reason and "missing" in r.skipped[0].reason


@pytest.mark.parametrize("bad", [b"", b"{", b'{"format": "other", "files": {}}', b'{"format": "slurm-ft-ckpt"}'])
def test_corrupt_marker_is_skipped(bad):
    files = ours("/c", 200, {"r0": b"bb"})
    files["/c/step_000200/COMPLETE"] = bad
    r = ckpt.latest("/c", MemFS({**ours("/c", 100, {"r0": b"a"}), **files}))
    assert r.step == 100 and r.skipped[0].path == "/c/step_000200"


def test_marker_step_must_match_directory():
    files = ours("/c", 200, {"r0": b"bb"})
    files["/c/step_000200/COMPLETE"] = marker(300, {"r0": b"bb"})
    r = ckpt.latest("/c", MemFS({**ours("/c", 100, {"r0": b"a"}), **files}))
    assert r.step == 100 and "step 300" in r.skipped[0].reason


def test_staging_directory_reported_never_returned():
    fs = MemFS({**ours("/c", 100, {"r0": b"aa"}), "/c/.step_000200.partial-77.0/r0": b"bb"})
    r = ckpt.latest("/c", fs)
    assert r.step == 100
    assert r.skipped[0].reason == "staging directory of an unfinished write"


def test_checksum_checked_only_with_verify():
    files = ours("/c", 200, {"r0": b"bb"})
    files["/c/step_000200/r0"] = b"XX"                 # same size, other bytes
    fs = MemFS({**ours("/c", 100, {"r0": b"aa"}), **files})
    assert ckpt.latest("/c", fs).step == 200
    r = ckpt.latest("/c", fs, verify=True)
    assert r.step == 100 and "sha256" in r.skipped[0].reason


def test_checkpoint_data_with_nothing_complete_is_refused_not_a_fresh_start():
    r = ckpt.latest("/c", MemFS(ours("/c", 100, {"r0": b"aa"}, mark=False)))
    assert r.path is None and r.refuse and r.must_not_start and not r.error
    assert "not starting from scratch" in r.reason and "/c/step_000100" in r.reason
    assert len(r.skipped) == 1


def test_only_our_staging_and_logs_is_a_fresh_start():
    r = ckpt.latest("/c", MemFS({"/c/.step_000001.partial-9/r0": b"x", "/c/trainer-log.jsonl": b"{}",
                                  "/c/notes.txt": b"hi", "/c/tb_logs/events": b"e"}))
    assert r.path is None and not r.refuse and not r.must_not_start
    assert [s.verdict for s in r.skipped] == ["ignored"]


def test_an_empty_step_dir_is_no_data_but_an_empty_marker_is(tmp_path):
    (tmp_path / "step_5").mkdir()                       # a save killed before its first byte
    r = ckpt.latest(str(tmp_path))
    assert r.path is None and not r.refuse and r.skipped[0].verdict == "ignored"
    (tmp_path / "step_6").mkdir()
    (tmp_path / "step_6" / "COMPLETE").write_bytes(b"")
    r = ckpt.latest(str(tmp_path))
    assert r.refuse and r.skipped[0].path == str(tmp_path / "step_6")


def test_missing_and_empty_directory():
    assert "does not exist" in ckpt.latest("/nope", MemFS({})).reason
    assert "no checkpoint in /c yet" in ckpt.latest("/c", MemFS({"/c/readme.txt": b"hi"})).reason


# --- Megatron -----------------------------------------------------------------------------------

def mega(root, it, ok=True):
    return {f"{root}/iter_{it:07d}/mp_rank_00/model_optim_rng.pt": b"w" if ok else b""}


def test_megatron_follows_tracker():
    fs = MemFS({**mega("/m", 100), **mega("/m", 200), "/m/latest_checkpointed_iteration.txt": b"200\n"})
    r = ckpt.latest("/m", fs)
    assert (r.path, r.step, r.layout) == ("/m/iter_0000200", 200, "megatron")


def test_megatron_dir_newer_than_tracker_is_in_progress():
    fs = MemFS({**mega("/m", 100), **mega("/m", 200), "/m/latest_checkpointed_iteration.txt": b"100"})
    r = ckpt.latest("/m", fs)
    assert r.step == 100 and "write in progress" in r.skipped[0].reason


def test_megatron_tracker_at_missing_dir_falls_back():
    fs = MemFS({**mega("/m", 100), "/m/latest_checkpointed_iteration.txt": b"300"})
    r = ckpt.latest("/m", fs)
    assert r.step == 100
    assert r.skipped[0].path == "/m/iter_0000300" and "missing directory" in r.skipped[0].reason


def test_megatron_tracker_at_partial_dir_falls_back():
    fs = MemFS({**mega("/m", 100), **mega("/m", 200, ok=False), "/m/latest_checkpointed_iteration.txt": b"200"})
    r = ckpt.latest("/m", fs)
    assert r.step == 100 and "empty" in r.skipped[0].reason


def test_megatron_torch_dist_format():
    fs = MemFS({"/m/iter_0000050/.metadata": b"\x80\x04..__0_0.distcp..", "/m/iter_0000050/__0_0.distcp": b"d",
                "/m/latest_checkpointed_iteration.txt": b"50"})
    assert ckpt.latest("/m", fs).step == 50


# --- DeepSpeed ----------------------------------------------------------------------------------

def ds(root, step, ok=True):
    return {f"{root}/global_step{step}/mp_rank_00_model_states.pt": b"m",
            f"{root}/global_step{step}/zero_pp_rank_0_mp_rank_00_optim_states.pt": b"o" if ok else b""}


def test_deepspeed_follows_latest():
    fs = MemFS({**ds("/d", 10), **ds("/d", 20), "/d/latest": b"global_step20"})
    r = ckpt.latest("/d", fs)
    assert (r.path, r.step, r.layout) == ("/d/global_step20", 20, "deepspeed")


def test_deepspeed_partial_tag_falls_back():
    fs = MemFS({**ds("/d", 10), **ds("/d", 20, ok=False), "/d/latest": b"global_step20"})
    r = ckpt.latest("/d", fs)
    assert r.step == 10 and "optim_states.pt is empty" in r.skipped[0].reason


def test_deepspeed_tag_missing():
    fs = MemFS({**ds("/d", 10), "/d/latest": b"global_step30"})
    r = ckpt.latest("/d", fs)
    assert r.step == 10 and "missing directory" in r.skipped[0].reason


# --- the writer, on the real filesystem ---------------------------------------------------------

def test_write_checkpoint_round_trip(tmp_path):
    d = str(tmp_path)
    p1 = ckpt.write_checkpoint(d, 1, {"a": b"1"})
    p2 = ckpt.write_checkpoint(d, 2, {"a": b"22", "b": b"x"}, meta={"world": 2})
    assert sorted(os.listdir(d)) == ["step_000001", "step_000002"]      # no staging left behind
    r = ckpt.latest(d, verify=True)
    assert (r.path, r.step) == (p2, 2)
    manifest = json.loads(open(os.path.join(p2, "COMPLETE")).read())
    assert manifest["files"]["a"]["size"] == 2 and manifest["meta"] == {"world": 2}
    # truncate a file of the newest: the previous one is returned
    with open(os.path.join(p2, "a"), "wb") as fh:
        fh.write(b"2")
    assert ckpt.latest(d).path == p1


def test_sharded_write_commit_requires_every_shard(tmp_path):
    d = str(tmp_path)
    ckpt.write_shard(d, 5, "job7.0", "rank_00000", b"r0")
    with pytest.raises(FileNotFoundError):
        ckpt.commit(d, 5, "job7.0", expect=["rank_00000", "rank_00001"])
    assert ckpt.latest(d).path is None                  # only staging: nothing to resume from
    ckpt.write_shard(d, 5, "job7.0", "rank_00001", b"r1")
    assert ckpt.commit(d, 5, "job7.0", expect=["rank_00000", "rank_00001"]) == os.path.join(d, "step_000005")
    assert ckpt.latest(d).step == 5


def test_rewrite_of_same_step_replaces(tmp_path):
    d = str(tmp_path)
    ckpt.write_checkpoint(d, 3, {"a": b"old"})
    ckpt.write_checkpoint(d, 3, {"a": b"newer"})
    assert open(os.path.join(d, "step_000003", "a"), "rb").read() == b"newer"
    assert os.listdir(d) == ["step_000003"]


def test_prune_keeps_newest_complete(tmp_path):
    d = str(tmp_path)
    for s in (1, 2, 3, 4):
        ckpt.write_checkpoint(d, s, {"a": b"x"})
    os.remove(os.path.join(d, "step_000004", "COMPLETE"))
    ckpt.prune(d, keep=2)
    assert sorted(os.listdir(d)) == ["step_000002", "step_000003", "step_000004"]
    assert ckpt.latest(d).step == 3


# --- the command --------------------------------------------------------------------------------

def test_cli_latest_plain_json_and_exit_codes(tmp_path):
    runner = CliRunner()
    d = str(tmp_path)
    r = runner.invoke(cli, ["ckpt", "latest", d])
    assert r.exit_code == 1 and "no checkpoint" in r.output
    ckpt.write_checkpoint(d, 10, {"a": b"x"})
    os.makedirs(os.path.join(d, "step_000020"))
    r = runner.invoke(cli, ["ckpt", "latest", d])
    assert r.exit_code == 0 and r.stdout.strip() == os.path.join(d, "step_000010")
    r = runner.invoke(cli, ["ckpt", "latest", "--json", d])
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["step"] == 10 and doc["layout"] == "slurm-ft"
    assert doc["skipped"][0]["path"].endswith("step_000020")


class BrokenFS(MemFS):
    def __init__(self, files, broken):
        super().__init__(files)
        self.broken = broken

    def list(self, path):
        if path in self.broken:
            raise PermissionError(13, "Permission denied")
        return super().list(path)


def test_unreadable_directory_is_an_error_not_an_empty_one():
    r = ckpt.latest("/c", BrokenFS(ours("/c", 1, {"a": b"x"}), {"/c"}))
    assert r.path is None and r.error and "Permission denied" in r.reason


def test_unreadable_candidate_is_skipped():
    fs = BrokenFS({**ours("/c", 1, {"a": b"x"}), **ours("/c", 2, {"a": b"y"})}, {"/c/step_000002"})
    r = ckpt.latest("/c", fs)
    assert r.step == 1 and not r.error and "unreadable" in r.skipped[0].reason


def test_unreadable_directory_exit_4_in_cli_and_the_starter_refuses_to_start(tmp_path, monkeypatch):
    from slurm_ft.job import jobstart
    d = str(tmp_path)
    ckpt.write_checkpoint(d, 1, {"a": b"x"})
    real = ckpt.LocalFS.list

    def broken(self, path):
        if path == d:
            raise OSError(5, "Input/output error")
        return real(self, path)

    monkeypatch.setattr(ckpt.LocalFS, "list", broken)
    r = CliRunner().invoke(cli, ["ckpt", "latest", d])
    assert r.exit_code == 4 and "Input/output error" in r.output
    execs = []
    monkeypatch.setattr(jobstart.os, "execvp", lambda *a: execs.append(a))
    assert jobstart.main(["--ckpt-dir", d, "--", "/bin/echo", "{ckpt}"]) == 4
    assert execs == []                          # never started from scratch behind the user's back


def hf(root, step, state=True, weights=b"w"):
    out = {f"{root}/checkpoint-{step}/model.safetensors": weights, f"{root}/checkpoint-{step}/optimizer.pt": b"o"}
    if state:
        out[f"{root}/checkpoint-{step}/trainer_state.json"] = json.dumps({"global_step": step}).encode()
    return out


def test_hf_trainer_newest_with_state():
    fs = MemFS({**hf("/h", 500), **hf("/h", 1000), **hf("/h", 1500, state=False)})
    r = ckpt.latest("/h", fs)
    assert (r.path, r.step, r.layout) == ("/h/checkpoint-1000", 1000, "hf")
    assert "trainer_state.json" in r.skipped[0].reason


def test_hf_trainer_empty_weights_or_wrong_step():
    files = {**hf("/h", 500), **hf("/h", 1000, weights=b"")}
    assert ckpt.latest("/h", MemFS(files)).step == 500
    files = {**hf("/h", 500), **hf("/h", 1000)}
    files["/h/checkpoint-1000/trainer_state.json"] = b'{"global_step": 900}'
    r = ckpt.latest("/h", MemFS(files))
    assert r.step == 500 and "step 900" in r.skipped[0].reason


CRASHER = r"""
import os, sys
from slurm_ft.job import ckpt
d, crash_at = sys.argv[1], int(sys.argv[2])
count = [0]
def point(real):
    def wrapped(*a, **k):
        count[0] += 1
        if count[0] == crash_at:
            os._exit(9)                      # like SIGKILL: no cleanup, no flush of ours
        return real(*a, **k)
    return wrapped
os.replace = point(os.replace)
os.fsync = point(os.fsync)
os.makedirs = point(os.makedirs)
ckpt.write_shard(d, 20, "run", "rank_00000", b"a" * 1000)
ckpt.write_shard(d, 20, "run", "rank_00001", b"b" * 1000)
ckpt.commit(d, 20, "run", expect=["rank_00000", "rank_00001"])
print(count[0])
"""


def test_a_crash_at_any_point_of_a_write_leaves_the_previous_or_the_new_checkpoint(tmp_path):
    """Kill the writer at every fsync/rename/mkdir in turn: latest() never returns a partial checkpoint."""
    import subprocess
    import sys
    seen_new = seen_old = 0
    for crash_at in range(1, 100):
        d = tmp_path / f"c{crash_at}"
        ckpt.write_checkpoint(str(d), 10, {"rank_00000": b"x", "rank_00001": b"y"})
        p = subprocess.run([sys.executable, "-c", CRASHER, str(d), str(crash_at)], capture_output=True,
                           text=True, timeout=60)
        r = ckpt.latest(str(d), verify=True)
        assert r.path is not None, (crash_at, r)
        assert r.step in (10, 20), (crash_at, r)
        if r.step == 20:
            seen_new += 1
            assert sorted(os.listdir(r.path)) == ["COMPLETE", "rank_00000", "rank_00001"]
        else:
            seen_old += 1
        if p.returncode == 0:                # the write ran to its end: every crash point was tried
            assert r.step == 20
            break
    else:
        pytest.fail("the writer never finished")
    assert seen_old >= 5 and seen_new >= 1
