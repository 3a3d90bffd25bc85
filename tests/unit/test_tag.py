"""The job tag: round trip, strictness against ordinary comments, odd paths."""
from __future__ import annotations

import pytest

from slurm_ft.recovery.tag import DEFAULT_MAX_RESTARTS, FtSpec, decode, encode, is_tagged


@pytest.mark.parametrize("spec", [
    FtSpec(),
    FtSpec(ckpt_dir="/ckpt/run1", min_nodes=60, max_restarts=3),
    FtSpec(ckpt_dir="/data/my run/with spaces", max_restarts=0),
    FtSpec(ckpt_dir="/x/a=b c%20d\nnewline;$(rm -rf /)`id`'\"", min_nodes=1),
    FtSpec(ckpt_dir="/données/ünïcode"),
])
def test_round_trip(spec):
    comment = encode(spec)
    assert "\n" not in comment
    assert comment.startswith("slurm-ft:v1")
    assert decode(comment) == spec


def test_path_with_spaces_is_one_word():
    comment = encode(FtSpec(ckpt_dir="/a b/c"))
    assert comment.split(" ")[1] == "ckpt=/a%20b/c"


@pytest.mark.parametrize("comment", [
    "", "slurm-ft", "slurm-ft rocks", "my job for slurm-ft:v1", "slurm-ft:v1x",
    "slurm-ft:v2 ckpt=/x",                 # a future version we cannot interpret
    "slurm-ft:v1 ckpt=/a b",               # unencoded space: not ours
    "slurm-ft:v1 color=red",               # unknown key
    "slurm-ft:v1 ckpt=/a ckpt=/b",         # duplicate key
    "slurm-ft:v1 min_nodes=0",
    "slurm-ft:v1 min_nodes=-3",
    "slurm-ft:v1 max_restarts=lots",
    "slurm-ft:v1 max_restarts=007",
    "slurm-ft:v1  ckpt=/x",                # double space
    "slurm-ft:v01",
])
def test_unrelated_or_malformed_comment_is_not_a_tag(comment):
    assert decode(comment) is None
    assert not is_tagged(comment)


def test_defaults_when_fields_absent():
    assert decode("slurm-ft:v1") == FtSpec(ckpt_dir="", min_nodes=None, max_restarts=DEFAULT_MAX_RESTARTS)


def test_field_order_does_not_matter():
    assert decode("slurm-ft:v1 max_restarts=2 ckpt=/c min_nodes=4") == FtSpec("/c", 4, 2)


def test_encode_refuses_nonsense():
    with pytest.raises(ValueError):
        encode(FtSpec(min_nodes=0))
    with pytest.raises(ValueError):
        encode(FtSpec(max_restarts=-1))


def test_hot_spares_round_trip_and_strictness():
    spec = FtSpec(ckpt_dir="/ck", hot_spares=2, train_nodes=64)
    assert encode(spec).endswith("hot_spares=2 train_nodes=64")
    assert decode(encode(spec)) == spec
    for bad in ("slurm-ft:v1 hot_spares=2", "slurm-ft:v1 train_nodes=4", "slurm-ft:v1 hot_spares=0 train_nodes=4",
                "slurm-ft:v1 hot_spares=1 train_nodes=0", "slurm-ft:v1 hot_spares=x train_nodes=4"):
        assert decode(bad) is None, bad
