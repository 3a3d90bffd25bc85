"""The lab's job users (lab/slurm_ft_lab/users.py): commands as a user, their environment, and why one
cannot run the lab's Python. Creating the users themselves is `lab up`'s (tests/lab/test_lab.py)."""
from __future__ import annotations

import os

import pytest

from slurm_ft_lab import users

NOBODY = users.User("nobody", 65534, 65534)


def _root() -> None:
    if os.geteuid() != 0:
        pytest.fail("needs root: the test runs commands as user nobody (CI and the clean rooms run as root)")


def test_a_command_as_a_user_is_setprivs_argv():
    assert users.as_user(NOBODY, ["sbatch", 3]) == ["setpriv", "--reuid=65534", "--regid=65534", "--init-groups",
                                                     "--", "sbatch", "3"]


def test_the_users_environment_is_the_callers_with_their_names_and_home(tmp_path):
    env = users.environ(NOBODY, {"SLURM_CONF": "/x", "USER": "root", "HOME": "/root"}, tmp_path)
    assert env == {"SLURM_CONF": "/x", "USER": "nobody", "LOGNAME": "nobody", "HOME": str(tmp_path)}


def test_the_user_client_runs_slurms_commands_as_the_user():
    _root()
    c = users.UserClient(NOBODY, env={})
    res = c._run(["id", "-u"])
    assert res.stdout.strip() == "65534" and res.argv[:2] == ("setpriv", "--reuid=65534")


def test_why_a_user_cannot_run_a_python_names_the_directory():
    _root()
    import shutil
    import tempfile
    top = tempfile.mkdtemp(prefix="slurm-ft-users-test-")        # pytest's tmp_path is root's alone already
    try:
        os.chmod(top, 0o755)
        private = os.path.join(top, "private")
        os.makedirs(os.path.join(private, "bin"), mode=0o700)
        os.chmod(private, 0o700)
        python = os.path.join(private, "bin", "python3")
        assert users.blocked_by(python) == f"; {private} is not searchable by others (mode 700)"
        assert users.blocked_by(os.path.join(top, "python3")) == ""
        why = users.cannot_run(NOBODY, python, ("os",), {"PATH": os.environ["PATH"]}, "/")
        assert why.endswith(f"; {private} is not searchable by others (mode 700)"), why
    finally:
        shutil.rmtree(top)


def test_give_hands_a_tree_and_a_file_to_the_user(tmp_path):
    _root()
    d = tmp_path / "a" / "b"
    (d / "c").mkdir(parents=True)
    (d / "c" / "f").write_text("x")
    users.give(d, NOBODY, 0o700)
    assert {os.lstat(p).st_uid for p in (d, d / "c", d / "c" / "f")} == {65534}
    assert os.stat(d).st_mode & 0o777 == 0o700 and os.stat(tmp_path / "a").st_uid == 0
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    users.give(fifo, NOBODY)
    assert os.lstat(fifo).st_uid == 65534


def test_existing_users_are_looked_up_and_never_made_again():
    assert users.ensure(["root"]) == [users.User("root", 0, 0)]
    assert users.lookup("slurmft-no-such-user") is None
    with pytest.raises(Exception, match="no user 'slurmft-no-such-user'"):
        users.get("slurmft-no-such-user")
