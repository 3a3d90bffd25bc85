"""The job tag: round trip, strictness against ordinary comments, odd paths."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_ft.job.tag import DEFAULT_MAX_RESTARTS, FtSpec, decode, encode, is_tagged, with_note


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


def test_the_plugin_keys_round_trip_in_grammar_order():
    spec = FtSpec(ckpt_dir="/c", min_nodes=2, hot_spares=1, train_nodes=4, hang_timeout=600, max_restarts=7)
    assert encode(spec) == ("slurm-ft:v1 ckpt=/c min_nodes=2 hot_spares=1 train_nodes=4 hang_timeout=600 "
                            "max_restarts=7")
    assert decode(encode(spec)) == spec


@pytest.mark.parametrize("comment", ["slurm-ft:v1 hang_timeout=0", "slurm-ft:v1 hot_spares=-1",
                                     "slurm-ft:v1 hot_spares=x", "slurm-ft:v1 hang_timeout=01"])
def test_bad_plugin_values_are_not_a_tag(comment):
    assert decode(comment) is None


def test_a_note_after_the_tag_counts_only_where_notes_are_allowed():
    tag = encode(FtSpec(ckpt_dir="/a | b"))            # '|' inside a value is encoded: never a separator
    noted = with_note(tag, "slurm-ft: held:\n waiting for a spare")
    assert noted == tag + " | slurm-ft: held: waiting for a spare"
    assert decode(noted, noted=True) == FtSpec(ckpt_dir="/a | b")
    assert decode(noted) is None                       # Comment: the whole field must be the tag
    assert with_note(noted, "recovered") == tag + " | recovered"      # a new note replaces the old
    assert decode("slurm-ft: held: x", noted=True) is None           # a note alone is no tag


@given(st.text(min_size=1, max_size=60).map(lambda s: "/" + s), st.text(max_size=80))
def test_any_path_and_any_note_keep_the_tag(path, note):
    spec = FtSpec(ckpt_dir=path, hot_spares=3, train_nodes=8)
    assert decode(with_note(encode(spec), note), noted=True) == spec


def test_hot_spares_round_trip_and_strictness():
    spec = FtSpec(ckpt_dir="/ck", hot_spares=2, train_nodes=64)
    assert encode(spec) == "slurm-ft:v1 ckpt=/ck hot_spares=2 train_nodes=64 max_restarts=5"
    assert decode(encode(spec)) == spec
    assert decode("slurm-ft:v1 hot_spares=0") == FtSpec()          # what the policy writes for --ft-hot-spares=0
    for bad in ("slurm-ft:v1 hot_spares=2", "slurm-ft:v1 train_nodes=4", "slurm-ft:v1 hot_spares=0 train_nodes=4",
                "slurm-ft:v1 hot_spares=1 train_nodes=0", "slurm-ft:v1 hot_spares=x train_nodes=4"):
        assert decode(bad) is None, bad
