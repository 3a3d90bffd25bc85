"""The lab's job users: jobs run as unprivileged users, as on every real cluster.

A job's user is not exempt from Slurm's RPC rate limiter (root and SlurmUser are), cannot read the
kernel log (the lab's per-node log is root's, as /dev/kmsg is with kernel.dmesg_restrict=1), cannot
drain a node and cannot reach the node watcher's root-only socket. The lab runs its fault-tolerant
jobs as `slurmft-u0` (the default job user) so that every test sees what a user's job sees; the
others (`slurmft-u1` .. `slurmft-u9`) are there for tests that need several users (each has a token
bucket of its own under the rate limiter).

They are system accounts of this machine (no home, no login shell), created once by `lab up` and
shared by every lab on it: `lab down` leaves them (another lab may be running jobs as them);
`slurm-ft lab users --remove` deletes them when no process runs as them. Each lab gives them a
home of their own below its directory (HOME in the job user's environment).

Commands run as a user through setpriv (util-linux): the uid, the gid and the user's groups change,
no PAM session, no shell; the environment is the caller's, with USER, LOGNAME and HOME set.
"""
from __future__ import annotations

import os
import pwd
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from slurm_ft.errors import CommandError, EnvironmentProblem, UsageError
from slurm_ft.runner import Result, run
from slurm_ft.slurm.client import DEFAULT_TIMEOUT_S, SlurmClient

PREFIX = "slurmft-u"
NAMES = tuple(f"{PREFIX}{i}" for i in range(10))
DEFAULT = NAMES[0]               # the lab's job user: every fault-tolerant job of the tests, the demo, the bench
GECOS = "slurm-ft lab job user"


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


def lookup(name: str) -> Optional[User]:
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return None
    return User(pw.pw_name, pw.pw_uid, pw.pw_gid)


def get(name: str) -> User:
    """The user `name`; a UsageError naming the command that creates the lab's users when there is none."""
    user = lookup(name)
    if user is None:
        raise UsageError(f"no user {name!r} on this machine"
                         + (" (`slurm-ft lab up` creates the lab's users)" if name in NAMES else ""))
    return user


def ensure(names: Sequence[str] = NAMES) -> List[User]:
    """The lab's users, each created when missing (a system account: no home, no login shell, a group of
    its own). Idempotent; another lab's `up` creating the same user at the same moment is no error."""
    out = []
    for name in names:
        user = lookup(name)
        if user is None:
            if shutil.which("useradd") is None:
                raise EnvironmentProblem("useradd missing: run `apt-get install -y passwd` (the lab runs jobs "
                                         "as users of its own)")
            try:
                run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                     "--shell", "/usr/sbin/nologin", "--comment", GECOS, name], timeout=30)
            except CommandError as exc:
                if lookup(name) is None:          # not "created meanwhile by another lab's up"
                    raise EnvironmentProblem(f"cannot create the lab's job user {name}: {exc}") from None
            user = get(name)
        out.append(user)
    return out


def existing(names: Sequence[str] = NAMES) -> List[User]:
    return [u for u in map(lookup, names) if u is not None]


def processes_of(users: Sequence[User]) -> List[int]:
    """Pids of processes running as any of `users` (real uid)."""
    uids = {u.uid for u in users}
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            st = entry.stat()
        except OSError:
            continue
        if st.st_uid in uids:
            pids.append(int(entry.name))
    return pids


def remove(names: Sequence[str] = NAMES) -> List[str]:
    """Delete the lab's users (their group too). Refused while a process runs as one of them (a lab's
    job, a leftover step): `slurm-ft lab down` of every lab first. Returns the names deleted."""
    users = existing(names)
    busy = processes_of(users)
    if busy:
        raise UsageError(f"processes still run as the lab's users (pids {', '.join(map(str, busy[:8]))}"
                         f"{' ...' if len(busy) > 8 else ''}): take the labs down first")
    for u in users:
        run(["userdel", u.name], timeout=30)
    return [u.name for u in users]


def as_user(user: User, command: Sequence[str]) -> List[str]:
    """`command` as `user`: setpriv sets the real and effective uid and gid and the user's groups."""
    return ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups", "--", *map(str, command)]


def environ(user: User, base: Mapping[str, str], home: Optional[Path] = None) -> Dict[str, str]:
    """`base` as the user's environment: USER, LOGNAME and HOME are theirs (their home: the lab's dir for it)."""
    env = dict(base)
    env.update(USER=user.name, LOGNAME=user.name, HOME=str(home) if home is not None else "/nonexistent")
    return env


def give(path: Path, user: User, mode: Optional[int] = None) -> Path:
    """`path` owned by `user`: a file, or a directory (made when missing) and everything below it."""
    if not os.path.lexists(path):
        path.mkdir(parents=True)
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), user.uid, user.gid)
    os.lchown(path, user.uid, user.gid)
    if mode is not None:
        os.chmod(path, mode)
    return path


def cannot_run(user: User, python: str, modules: Sequence[str], env: Mapping[str, str], cwd: str) -> str:
    """Why `user` cannot run `python` and import `modules` ("" when they can): a job of theirs runs
    slurm-ft's starter, the supervisor and the trainer with this Python, from this source tree."""
    code = f"import os, sys; os.stat(os.path.realpath(sys.executable)); import {', '.join(modules)}"
    try:
        res = run(as_user(user, [python, "-c", code]), timeout=60, env=environ(user, env), cwd=cwd, check=False)
    except CommandError as exc:
        return str(exc)
    if res.returncode == 0:
        return ""
    last = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
    return f"{last}{blocked_by(python)}"


def blocked_by(path: str) -> str:
    """'; DIR is not searchable by others' for the first directory above `path` (resolved) that others
    cannot enter, else ''."""
    for parent in [*reversed(Path(os.path.realpath(path)).parents)]:
        try:
            if not parent.stat().st_mode & 0o001:
                return f"; {parent} is not searchable by others (mode {parent.stat().st_mode & 0o777:o})"
        except OSError:
            return ""
    return ""


class UserClient(SlurmClient):
    """A SlurmClient whose commands run as `user`: what that user's own sbatch, squeue and scontrol do
    and see (the rate limiter's bucket, the permissions), for tests and the demo."""

    def __init__(self, user: User, env: Mapping[str, str], timeout: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(env=env, timeout=timeout)
        self.user = user

    def _run(self, argv: Sequence[str], **kw: Any) -> Result:
        return super()._run(as_user(self.user, argv), **kw)
