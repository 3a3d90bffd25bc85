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

A checkout below a directory others cannot enter (root's home: /root is mode 0700 on Debian) is out of
their jobs' reach. `lab up` then gives these users alone search permission (x: enter, never list or
read) on each such directory on the way to the Python, slurm-ft and the checkout, with a POSIX ACL entry
per user (`setfacl -m u:slurmft-u0:x /root`, package acl): nobody else gains anything, /root's mode
bits stay 0700 (ls shows drwx--x---+: the ACL's mask). Why an ACL and not a venv and a copy of the
tree where others can reach it: the jobs run slurm-ft, the lab and the test jobs from the checkout
itself (an editable install), so an edit is what the next job runs, and no copy can be stale. The
grants are recorded in GRANTS and taken back with the users (`slurm-ft lab users --remove`), not by
`lab down`: the users, and other labs' jobs running as them, outlive one lab.
"""
from __future__ import annotations

import os
import pwd
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from slurm_ft.errors import CommandError, EnvironmentProblem, UsageError
from slurm_ft.runner import Result, run
from slurm_ft.slurm.client import DEFAULT_TIMEOUT_S, SlurmClient

PREFIX = "slurmft-u"
NAMES = tuple(f"{PREFIX}{i}" for i in range(10))
DEFAULT = NAMES[0]               # the lab's job user: every fault-tolerant job of the tests, the demo, the bench
GECOS = "slurm-ft lab job user"
# the directories `grant_search` gave the lab's users search permission on, each with its ACL mask before
# ("-": none), one "DIR<TAB>MASK" a line, for `revoke_search`
GRANTS = Path("/var/lib/slurm-ft-lab/search-grants")


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
    revoke_search(users)                  # by name: before the names are gone
    for u in users:
        run(["userdel", u.name], timeout=30)
    if not existing():
        revoke_search([], restore=True)
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


# --- the way in: search permission for the lab's users alone ----------------------------------------------
def closed_dirs(paths: Iterable[str]) -> List[Path]:
    """The directories on the way to each of `paths` (as written and resolved; a path that is a directory
    included) that others cannot enter (no x for others), outermost first, each once."""
    out: List[Path] = []
    for p in paths:
        for form in (Path(os.path.abspath(p)), Path(os.path.realpath(p))):
            try:
                chain = [*reversed(form.parents)] + ([form] if form.is_dir() else [])
            except OSError:
                continue
            for d in chain:
                try:
                    mode = d.stat().st_mode
                except OSError:
                    break                  # not ours to open: cannot_run says why
                if not mode & 0o001 and d not in out:
                    out.append(d)
    return out


def _acl(path: Path) -> List[str]:
    """`path`'s ACL entries as getfacl writes them (user::rwx, user:NAME:--x, mask::--x, ...)."""
    res = run(["getfacl", "--absolute-names", "--omit-header", "--no-effective", str(path)], timeout=30)
    return [ln.strip() for ln in res.stdout.splitlines() if ln.strip() and not ln.startswith(("#", "default:"))]


def _mask(entries: Sequence[str]) -> Optional[str]:
    return next((e.split(":")[2] for e in entries if e.startswith("mask::")), None)


def _grants() -> Dict[str, str]:
    try:
        lines = GRANTS.read_text().splitlines()
    except FileNotFoundError:
        return {}
    return dict(ln.split("\t", 1) for ln in lines if "\t" in ln)


def grant_search(users: Sequence[User], dirs: Sequence[Path]) -> None:
    """Give `users` search permission (x alone) on each of `dirs` by a named-user ACL entry, recorded in
    GRANTS. A mask already there keeps what it allowed, plus x (setfacl -n: not recomputed, so an
    admin's masked entries gain nothing more); none there: setfacl's own, the group bits and x."""
    if not dirs or not users:
        return
    if shutil.which("setfacl") is None or shutil.which("getfacl") is None:
        raise EnvironmentProblem(f"others cannot enter {dirs[0]}, and the lab gives its users their way in with "
                                 f"setfacl, which is missing: run `apt-get install -y acl` (./setup.sh does)")
    entries = ",".join(f"u:{u.name}:x" for u in users)
    recorded = _grants()
    for d in dirs:
        try:
            mask = _mask(_acl(d))
            if str(d) not in recorded:
                GRANTS.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                with GRANTS.open("a") as fh:
                    fh.write(f"{d}\t{mask or '-'}\n")
                recorded[str(d)] = mask or "-"
            if mask is None:
                run(["setfacl", "-m", entries, str(d)], timeout=30)
            else:
                run(["setfacl", "-n", "-m", f"{entries},m::{mask[:2]}x", str(d)], timeout=30)
        except CommandError as exc:
            raise EnvironmentProblem(f"cannot give the lab's users search permission on {d} (a POSIX ACL): {exc}; "
                                     f"clone slurm-ft where others may enter (/opt, /srv), or mount the file "
                                     f"system with ACLs") from None


def let_in(users: Sequence[User], paths: Iterable[str]) -> List[Path]:
    """`users` may enter every directory on the way to `paths` that others cannot (grant_search); those
    directories are returned ([] when there are none: nothing is changed)."""
    closed = closed_dirs(paths)
    grant_search(users, closed)
    return closed


def revoke_search(users: Sequence[User], restore: bool = False) -> None:
    """Take back `users`' entries from every directory in GRANTS. `restore` (no lab user left): each mask
    as it was before the first grant (none: removed when no named entry is left), and GRANTS forgotten."""
    recorded = _grants()
    if not recorded or shutil.which("setfacl") is None:
        return
    for d, before in recorded.items():
        if not os.path.isdir(d):
            continue
        if users:
            run(["setfacl", "-n", "-x", ",".join(f"u:{u.name}" for u in users), d], timeout=30, check=False)
        if restore:
            named = [e for e in _acl(Path(d)) if e.split(":")[0] in ("user", "group") and e.split(":")[1]]
            if before != "-":
                run(["setfacl", "-n", "-m", f"m::{before}", d], timeout=30, check=False)
            elif not named:
                run(["setfacl", "-x", "m::", d], timeout=30, check=False)
    if restore:
        GRANTS.unlink(missing_ok=True)


class UserClient(SlurmClient):
    """A SlurmClient whose commands run as `user`: what that user's own sbatch, squeue and scontrol do
    and see (the rate limiter's bucket, the permissions), for tests and the demo."""

    def __init__(self, user: User, env: Mapping[str, str], timeout: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(env=env, timeout=timeout)
        self.user = user

    def _run(self, argv: Sequence[str], **kw: Any) -> Result:
        return super()._run(as_user(self.user, argv), **kw)
