"""The job_submit policy (slurm_ft/data/job_submit.lua) under the Lua 5.1 library slurmctld links, with
`slurm` stubbed (tests/unit/luapolicy.py): what it refuses at submit time (review findings 11, 12)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from luapolicy import MODULE, Policy, library, literal   # same directory: pytest puts it on sys.path
from slurm_ft.job.tag import FtSpec, decode, encode


@pytest.fixture(scope="module")
def policy():
    lib = library()
    if lib is None:
        pytest.skip("needs the Lua 5.1 library (liblua5.1.so.0, as Slurm's job_submit/lua)")
    p = Policy(lib)
    yield p
    p.close()


def test_a_good_job_is_tagged_as_the_wrapper_tags_it(policy):
    rc, comment, user = policy.submit({"SLURM_FT_CKPT_DIR": "/ckpt/caf\u00e9 run".encode(),
                                       "SLURM_FT_HANG_TIMEOUT": b"600"})
    assert (rc, user) == (0, "")
    assert comment == encode(FtSpec(ckpt_dir="/ckpt/caf\u00e9 run", hang_timeout=600))
    assert decode(comment, noted=True).ckpt_dir == "/ckpt/caf\u00e9 run"


def test_hang_timeout_without_a_checkpoint_dir_is_refused(policy):
    """R12: a hang's restarts in place are counted in the checkpoint directory; the policy tagged
    `hang_timeout=60` with no `ckpt=`, and --max-restarts never ended the restarts."""
    rc, comment, user = policy.submit({"SLURM_FT_HANG_TIMEOUT": b"60"})
    assert (rc, comment) == (-1, "")
    assert user == ("slurm-ft: --ft-hang-timeout needs --ft-ckpt-dir: restarts after a hang are counted in the "
                    "checkpoint directory, and without one --ft-max-restarts could never end them")
    assert policy.submit({"SLURM_FT_MAX_RESTARTS": b"3"})[0] == 0      # other options alone: still allowed


def test_a_checkpoint_dir_that_is_not_utf8_is_refused(policy):
    """R11: the policy tagged ckpt=/ckpt/%FF%FE, which tag.decode refuses: the job looked fault-tolerant
    to its user and was silently ignored by the controller."""
    rc, comment, user = policy.submit({"SLURM_FT_CKPT_DIR": b"/ckpt/\xff\xfe"})
    assert (rc, comment) == (-1, "")
    assert user == ("slurm-ft: --ft-ckpt-dir /ckpt/%FF%FE: the checkpoint directory is not valid UTF-8 "
                    "(slurm-ft reads the directory as UTF-8: rename it)")
    for bad in (b"/ckpt/\xc0\xaf", b"/ckpt/\xed\xa0\x80", b"/ckpt/\xf4\x90\x80\x80", b"/ckpt/\xe2\x82"):
        assert policy.submit({"SLURM_FT_CKPT_DIR": bad})[0] == -1, bad


@pytest.fixture(scope="module")
def utf8_check(policy):
    """The policy's own valid_utf8, loaded alone as a global (it is local to the module's chunk)."""
    text = MODULE.read_bytes()
    start = text.index(b"local function valid_utf8(")
    body = text[start + len(b"local "):text.index(b"\nend\n", start) + len(b"\nend\n")]
    p = Policy(policy.lib, body)
    yield p
    p.close()


@settings(max_examples=300)
@given(st.binary(max_size=12))
def test_the_policys_utf8_check_is_pythons(utf8_check, data):
    try:
        data.decode("utf-8")
        want = "true"
    except UnicodeDecodeError:
        want = "false"
    assert utf8_check.call(b"valid_utf8(" + literal(data) + b")").decode() == want


@settings(max_examples=200)
@given(st.binary(min_size=1, max_size=40).map(lambda b: b"/" + b.replace(b"\0", b"")))
def test_whatever_the_policy_tags_the_controller_reads(policy, path):
    """Any directory bytes: refused at submit, or tagged so that tag.decode gives that directory back
    (the controller never silently ignores a job the policy accepted)."""
    rc, comment, _ = policy.submit({"SLURM_FT_CKPT_DIR": path})
    if rc == 0:
        spec = decode(comment, noted=True)
        want = path[:-1] if len(path) > 1 and path.endswith(b"/") else path
        assert spec is not None and spec.ckpt_dir.encode() == want


def test_replica_groups_are_tagged_as_the_wrapper_tags_them_and_need_the_starter(policy):
    from slurm_ft.job.submit import STARTER_MARK
    starter = f"#!/usr/bin/python3\n{STARTER_MARK}resolves...\n"
    rc, comment, user = policy.submit({"SLURM_FT_CKPT_DIR": b"/ck", "SLURM_FT_REPLICA_GROUPS": b"2",
                                       "SLURM_FT_HOT_SPARES": b"1"}, script=starter, min_nodes=5)
    assert (rc, user) == (0, "")
    assert comment == encode(FtSpec(ckpt_dir="/ck", hot_spares=1, train_nodes=4, replica_groups=2))
    rc, comment, _ = policy.submit({"SLURM_FT_CKPT_DIR": b"/ck", "SLURM_FT_REPLICA_GROUPS": b"2"}, script=starter,
                                   min_nodes=4)
    assert (rc, comment) == (0, encode(FtSpec(ckpt_dir="/ck", hot_spares=0, train_nodes=4, replica_groups=2)))
    rc, _, user = policy.submit({"SLURM_FT_REPLICA_GROUPS": b"2"}, min_nodes=4)              # not the starter
    assert rc == -1 and "supervisor" in user
    rc, _, user = policy.submit({"SLURM_FT_REPLICA_GROUPS": b"3"}, script=starter, min_nodes=4)
    assert rc == -1 and "not a whole number of groups" in user
    rc, _, user = policy.submit({"SLURM_FT_REPLICA_GROUPS": b"1"}, script=starter, min_nodes=4)
    assert rc == -1 and "from 2 to 1000" in user


def test_a_sites_own_rule_runs_beside_slurm_fts_policy(policy):
    """The site's job_submit.lua as the plugin lab writes it: its own rule refuses a job by name, and
    slurm-ft's module still tags the fault-tolerant jobs it lets through."""
    from slurm_ft_lab import plugin
    site = Policy(policy.lib, plugin.job_submit_lua(["train"], ["/ckpt"], site_rule=plugin.SITE_RULE).encode())
    try:
        rc, comment, user = site.submit({"SLURM_FT_CKPT_DIR": b"/ckpt/a"}, name=plugin.SITE_REFUSED_NAME)
        assert (rc, comment, user) == (-1, "", f"site rule: no job may be named {plugin.SITE_REFUSED_NAME} here")
        rc, comment, _ = site.submit({"SLURM_FT_CKPT_DIR": b"/ckpt/a"})
        assert (rc, comment) == (0, encode(FtSpec(ckpt_dir="/ckpt/a", max_restarts=5)))
        rc, _, user = site.submit({"SLURM_FT_CKPT_DIR": b"/elsewhere"})
        assert rc == -1 and "not under this site's checkpoint roots (/ckpt)" in user
    finally:
        site.close()


def test_the_module_defines_no_global_and_refuses_a_misspelt_rule(policy):
    """A site's slurm_job_submit stays the site's; a typo in configure{} stops the script loading, with why."""
    probe = Policy(policy.lib, b"return 'ok'")
    try:
        before = probe.call(b"(function() local n = 0 for _ in pairs(_G) do n = n + 1 end return n end)()")
        probe.call(b"(function() __m = dofile(" + literal(str(MODULE).encode()) + b") return 1 end)()")
        after = probe.call(b"(function() local n = 0 for _ in pairs(_G) do n = n + 1 end return n end)()")
        assert int(after) == int(before) + 1          # __m alone, the probe's own
        assert probe.call(b"type(slurm_job_submit)") == b"nil"
        err = probe.call(b"select(2, pcall(__m.configure, {ft_partition = {'train'}}))")
        assert b"unknown rule 'ft_partition' (ft_partitions, ckpt_roots, expedite)" in err
        err = probe.call(b"select(2, pcall(__m.configure, {ckpt_roots = '/ckpt'}))")
        assert b"ckpt_roots must be a list of strings" in err
    finally:
        probe.close()
