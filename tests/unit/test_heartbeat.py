"""slurm_ft.progress(step): what a rank writes, and what a reader accepts from the user's directory."""
from __future__ import annotations

import json
import os

from hypothesis import given, settings, strategies as st

import slurm_ft
from slurm_ft import heartbeat


def test_progress_writes_one_file_per_rank_and_read_all_returns_the_last(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_FT_CKPT_DIR", str(tmp_path))
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    for rank in (0, 3):
        monkeypatch.setenv("RANK", str(rank))
        slurm_ft.progress(10 + rank, force=True)
        slurm_ft.progress(20 + rank, force=True)
    got = heartbeat.read_all(str(tmp_path))
    assert {r: x["step"] for r, x in got.items()} == {0: 20, 3: 23}
    assert got[3]["job"] == "42" and got[3]["rank"] == 3
    assert sorted(os.listdir(tmp_path / heartbeat.DIR_NAME)) == ["rank-0.json", "rank-3.json"]


def test_progress_is_throttled_to_one_write_a_second(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_FT_CKPT_DIR", str(tmp_path))
    heartbeat._last.update(t=0.0, step=None)
    slurm_ft.progress(1)
    slurm_ft.progress(2)                        # within the second: dropped
    assert heartbeat.read_all(str(tmp_path))[0]["step"] == 1


def test_every_report_carries_the_processs_first_step(tmp_path, monkeypatch):
    # a reader that looks late still learns when the run's first step ended (goodput's end of a recovery)
    monkeypatch.setenv("SLURM_FT_CKPT_DIR", str(tmp_path))
    monkeypatch.setattr(heartbeat, "_first", {})
    slurm_ft.progress(41, force=True)
    first_t = heartbeat.read_all(str(tmp_path))[0]["t"]
    for step in (42, 43, 50):
        slurm_ft.progress(step, force=True)
    rec = heartbeat.read_all(str(tmp_path))[0]
    assert (rec["step"], rec["first_step"], rec["first_t"]) == (50, 41, first_t) and rec["t"] >= first_t


def test_outside_a_slurm_ft_job_progress_does_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("SLURM_FT_CKPT_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    slurm_ft.progress(5, force=True)
    assert os.listdir(tmp_path) == []


def test_an_unwritable_directory_never_raises(tmp_path, monkeypatch):
    (tmp_path / heartbeat.DIR_NAME).write_text("a file where the directory should be")
    monkeypatch.setenv("SLURM_FT_CKPT_DIR", str(tmp_path))
    slurm_ft.progress(5, force=True)


def test_the_reader_skips_what_is_not_a_report(tmp_path):
    d = tmp_path / heartbeat.DIR_NAME
    d.mkdir()
    (d / "rank-0.json").write_text(json.dumps({"step": 7, "t": 1.0, "rank": 0}))
    (d / "rank-1.json").write_text("{" * 200000)                       # deep nesting / too big
    (d / "rank-2.json").write_text(json.dumps({"step": "7", "t": 1.0, "rank": 2}))
    (d / "rank-3.json").write_text(json.dumps({"step": 7, "t": float("nan"), "rank": 3}))
    os.mkfifo(d / "rank-4.json")                                        # would block an open() for reading
    os.symlink("/dev/zero", d / "rank-5.json")
    (d / "other.json").write_text(json.dumps({"step": 7, "t": 1.0, "rank": 6}))
    assert list(heartbeat.read_all(str(tmp_path))) == [0]


@settings(max_examples=200)
@given(st.binary(max_size=600))
def test_any_bytes_in_a_rank_file_are_a_report_or_skipped(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("hb")
    d = root / heartbeat.DIR_NAME
    d.mkdir()
    (d / "rank-0.json").write_bytes(data)
    for rec in heartbeat.read_all(str(root)).values():
        assert type(rec["step"]) is int and type(rec["rank"]) is int


def test_a_symlinked_progress_directory_is_not_followed(tmp_path):
    """R6 step 1: CKPT/.slurm-ft-progress -> a 0700 directory elsewhere; root's reader followed it and
    returned that directory's report (the checkpoint scanner's LocalFS.list refuses the same path)."""
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    (secret / "rank-0.json").write_text(json.dumps({"step": 987654, "t": 1.0, "rank": 0, "host": "secret-host"}))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    os.symlink(secret, ckpt / heartbeat.DIR_NAME)
    assert heartbeat.read_all(str(ckpt)) == {}
    # the checkpoint directory itself may be a link (/ckpt -> /lustre/...): only what is below it is not followed
    real = tmp_path / "lustre-run"
    (real / heartbeat.DIR_NAME).mkdir(parents=True)
    (real / heartbeat.DIR_NAME / "rank-0.json").write_text(json.dumps({"step": 5, "t": 1.0, "rank": 0}))
    os.symlink(real, tmp_path / "run")
    assert heartbeat.read_all(str(tmp_path / "run"))[0]["step"] == 5


def test_the_reader_looks_at_a_bounded_number_of_entries(tmp_path, monkeypatch):
    """R6: 200,000 junk entries cost every read 1.65 s, however few ranks the reader wants."""
    d = tmp_path / heartbeat.DIR_NAME
    d.mkdir()
    for i in range(3000):
        (d / f"junk-{i}").touch()
    real = os.scandir
    pulled = []

    class Counting:
        def __init__(self, it):
            self.it = it

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.it.close()

        def __iter__(self):
            for e in self.it:
                pulled.append(e.name)
                yield e

    monkeypatch.setattr(heartbeat.os, "scandir", lambda p: Counting(real(p)))
    assert heartbeat.read_all(str(tmp_path), max_ranks=8) == {}
    assert len(pulled) <= 80                    # max_entries(8): 2 x 8 ranks + 64
