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


def test_a_directory_others_cannot_enter_is_opened_to_the_lab_users_alone_and_closed_again(monkeypatch):
    """A checkout in root's home (/root 0700): `lab up` lets its users in by an ACL entry each, search
    permission alone (enter, never list), and `lab users --remove` takes it back, the mode as it was."""
    _root()
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path
    if shutil.which("setfacl") is None:
        pytest.fail("needs setfacl: apt-get install -y acl (./setup.sh installs it)")
    top = Path(tempfile.mkdtemp(prefix="slurm-ft-users-test-"))
    monkeypatch.setattr(users, "GRANTS", top / "grants")
    try:
        os.chmod(top, 0o755)
        home = top / "root"
        (home / "slurm-ft").mkdir(parents=True)
        os.chmod(home, 0o700)
        job = home / "slurm-ft" / "job.py"
        job.write_text("x")

        def as_nobody(*argv: str) -> int:
            return subprocess.run(users.as_user(NOBODY, argv), capture_output=True, timeout=30, cwd="/").returncode

        assert users.closed_dirs([str(job), str(home / "slurm-ft")]) == [home]
        assert as_nobody("cat", str(job)) != 0
        assert users.let_in([NOBODY], [str(job)]) == [home]
        assert as_nobody("cat", str(job)) == 0 and as_nobody("ls", str(home)) != 0      # enter, never list
        assert os.stat(home).st_mode & 0o007 == 0                                     # nobody else: still none
        acl = subprocess.run(["getfacl", "-cp", str(home)], capture_output=True, text=True).stdout.split()
        assert "user:nobody:--x" in acl and "group::---" in acl and "other::---" in acl
        users.let_in([NOBODY], [str(job)])                                           # again: the same grant
        assert users.GRANTS.read_text() == f"{home}\t-\n"                            # as it was: no mask
        users.revoke_search([NOBODY], restore=True)
        assert as_nobody("cat", str(job)) != 0 and os.stat(home).st_mode & 0o777 == 0o700
        assert "nobody" not in subprocess.run(["getfacl", "-cp", str(home)], capture_output=True, text=True).stdout
        assert not users.GRANTS.exists()
        # an admin's own entry under a mask: it gains nothing but x while the lab's users are in, and the
        # mask is as it was after
        subprocess.run(["setfacl", "-m", "u:daemon:rwx,m::r--", str(home)], check=True)
        users.let_in([NOBODY], [str(job)])
        assert "mask::r-x" in subprocess.run(["getfacl", "-cp", str(home)], capture_output=True, text=True).stdout
        users.revoke_search([NOBODY], restore=True)
        acl = subprocess.run(["getfacl", "-cp", str(home)], capture_output=True, text=True).stdout.split()
        assert "mask::r--" in acl and "user:daemon:rwx" in acl and "user:nobody:--x" not in acl
    finally:
        shutil.rmtree(top)
