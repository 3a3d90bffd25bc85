"""The checkpoint scan over what PyTorch itself writes: torch.distributed.checkpoint (DCP) directories and
torch.save zip files (Lightning's *.ckpt), made here by the real torch (CPU build, the `torch` extra)."""
from __future__ import annotations

import os

import pytest

from slurm_ft.job import ckpt

torch = pytest.importorskip("torch", reason="no torch in this venv: setup.sh found no build of the torch extra for this Python")
dcp = pytest.importorskip("torch.distributed.checkpoint")


def state(step: int) -> dict:
    torch.manual_seed(step)
    model = torch.nn.Linear(8, 4)
    return {"model": model.state_dict(), "step": torch.tensor(step)}


def dcp_save(path, step: int) -> str:
    dcp.save(state(step), checkpoint_id=str(path))     # one process, no process group: rank 0 writes all
    return str(path)


def dcp_step(path) -> int:
    target = state(0)
    dcp.load(target, checkpoint_id=str(path))
    return int(target["step"])


def test_dcp_saves_in_step_dirs_are_dcp_not_unfinished_slurm_ft_ones(tmp_path):
    """The field bug: DCP into CKPT/step_N/ was taken for slurm-ft's marker layout and every save skipped."""
    for s in (10, 20, 30):
        dcp_save(tmp_path / f"step_{s}", s)
    r = ckpt.latest(str(tmp_path))
    assert (r.path, r.step, r.layout, r.skipped) == (str(tmp_path / "step_30"), 30, "dcp", ())
    assert dcp_step(r.path) == 30                       # and torch loads what we chose


def test_dcp_save_in_progress_falls_back_to_the_previous(tmp_path):
    dcp_save(tmp_path / "step_10", 10)
    newest = dcp_save(tmp_path / "step_20", 20)
    os.remove(os.path.join(newest, ".metadata"))        # DCP writes .metadata last: killed before it
    r = ckpt.latest(str(tmp_path))
    assert r.step == 10 and dcp_step(r.path) == 10
    [s] = r.skipped
    assert s.path == newest and s.verdict == "incomplete" and "no layout's evidence" in s.reason


def test_dcp_storage_file_named_in_metadata_missing_or_metadata_truncated(tmp_path):
    dcp_save(tmp_path / "step_10", 10)
    a = dcp_save(tmp_path / "step_20", 20)
    b = dcp_save(tmp_path / "step_30", 30)
    [shard] = [n for n in os.listdir(a) if n.endswith(".distcp")]
    os.remove(os.path.join(a, shard))
    meta = os.path.join(b, ".metadata")
    data = open(meta, "rb").read()
    open(meta, "wb").write(data[: len(data) // 2])
    r = ckpt.latest(str(tmp_path))
    assert r.step == 10
    why = {s.path: s.reason for s in r.skipped}
    assert shard in why[a] and "missing" in why[a]
    assert "not a whole pickle" in why[b]


def test_only_incomplete_dcp_saves_are_refused_never_a_fresh_start(tmp_path):
    for s in (10, 20):
        d = dcp_save(tmp_path / f"step_{s}", s)
        os.remove(os.path.join(d, ".metadata"))
    r = ckpt.latest(str(tmp_path))
    assert r.path is None and r.refuse and "not starting from scratch" in r.reason
    assert [s.step for s in r.skipped] == [20, 10]


def test_dcp_in_the_directory_itself_and_megatron_torch_dist(tmp_path):
    d = dcp_save(tmp_path / "run", 5)
    r = ckpt.latest(d)
    assert (r.path, r.layout) == (d, "dcp")
    m = tmp_path / "mega"
    dcp_save(m / "iter_0000050", 50)
    dcp_save(m / "iter_0000060", 60)                    # newer than the tracker: a write in progress
    (m / "latest_checkpointed_iteration.txt").write_text("50\n")
    r = ckpt.latest(str(m))
    assert (r.step, r.path) == (50, str(m / "iter_0000050"))
    assert "write in progress" in r.skipped[0].reason


def zsave(path, step: int) -> str:
    torch.save({"state_dict": state(step)["model"], "global_step": step}, str(path))
    return str(path)


def test_torch_save_files_last_ckpt_and_a_truncated_one(tmp_path):
    zsave(tmp_path / "epoch=0-step=100.ckpt", 100)
    zsave(tmp_path / "epoch=1-step=200.ckpt", 200)
    last = zsave(tmp_path / "last.ckpt", 200)
    r = ckpt.latest(str(tmp_path))
    assert (r.path, r.layout) == (last, "torchzip")
    data = open(last, "rb").read()
    for cut in (len(data) - 10, len(data) // 2, 3, 0):
        open(last, "wb").write(data[:cut])
        r = ckpt.latest(str(tmp_path))
        assert (r.path, r.step) == (str(tmp_path / "epoch=1-step=200.ckpt"), 200), cut
        assert r.skipped[0].path == last and r.skipped[0].reason
        assert torch.load(r.path, weights_only=True)["global_step"] == 200


def test_last_ckpt_symlink_gives_its_targets_step_and_a_link_out_of_dir_is_not_followed(tmp_path):
    zsave(tmp_path / "epoch=1-step=300.ckpt", 300)
    os.symlink("epoch=1-step=300.ckpt", tmp_path / "last.ckpt")
    r = ckpt.latest(str(tmp_path))
    assert (r.path, r.step) == (str(tmp_path / "last.ckpt"), 300)
    os.remove(tmp_path / "last.ckpt")
    other = tmp_path.parent / f"{tmp_path.name}-elsewhere.ckpt"
    zsave(other, 900)
    os.symlink(str(other), tmp_path / "last.ckpt")
    r = ckpt.latest(str(tmp_path))
    assert r.step == 300 and "not followed" in r.skipped[0].reason


def test_sharded_lightning_checkpoint_is_a_dcp_directory_named_ckpt(tmp_path):
    zsave(tmp_path / "epoch=0-step=10.ckpt", 10)
    d = dcp_save(tmp_path / "last.ckpt", 20)
    assert ckpt.latest(str(tmp_path)).path == d
    os.remove(os.path.join(d, ".metadata"))
    r = ckpt.latest(str(tmp_path))
    assert r.path == str(tmp_path / "epoch=0-step=10.ckpt") and r.skipped[0].path == d
