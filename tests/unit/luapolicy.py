"""slurm_ft/data/job_submit.lua (which loads slurm_ft_policy.lua beside it) run as slurmctld's job_submit/lua
runs it (luaL_loadfile: the chunk is named after its path), without slurmctld: the
system's Lua 5.1 library (the one Debian's Slurm links) through ctypes, with the `slurm` table stubbed.
`submit(env)` calls slurm_job_submit with a job_desc whose job control environment is `env` and returns
(rc, admin_comment, the line slurm.log_user gave the user)."""
from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path
from typing import Mapping, Optional, Tuple

POLICY = Path(__file__).resolve().parents[2] / "slurm_ft" / "data" / "job_submit.lua"
MODULE = POLICY.parent / "slurm_ft_policy.lua"      # slurm-ft's module, which POLICY loads
LIBS = ("liblua5.1.so.0", "liblua5.1.so", ctypes.util.find_library("lua5.1") or "")
PRELUDE = b"""
slurm = {SUCCESS = 0, ERROR = -1, NO_VAL = 4294967294}
function slurm.log_user(fmt, ...) __user = string.format(fmt, ...) end
function slurm.log_info(fmt, ...) end
"""


def library() -> Optional[ctypes.CDLL]:
    for name in LIBS:
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.luaL_newstate.restype = ctypes.c_void_p
        lib.luaL_openlibs.argtypes = [ctypes.c_void_p]
        lib.luaL_loadbuffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p]
        lib.lua_pcall.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.lua_tolstring.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)]
        lib.lua_tolstring.restype = ctypes.POINTER(ctypes.c_char)
        lib.lua_settop.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.lua_close.argtypes = [ctypes.c_void_p]
        return lib
    return None


def literal(value: bytes) -> bytes:
    """A Lua string literal holding exactly these bytes."""
    return b'"' + b"".join(b"\\%d" % c for c in value) + b'"'


class Policy:
    def __init__(self, lib: ctypes.CDLL, source: bytes = b"") -> None:
        self.lib = lib
        self.L = lib.luaL_newstate()
        lib.luaL_openlibs(self.L)
        self._run(PRELUDE, "prelude")
        self._run(source or POLICY.read_bytes(), f"@{POLICY}")

    def _run(self, chunk: bytes, name: str) -> bytes:
        lib, L = self.lib, self.L
        if lib.luaL_loadbuffer(L, chunk, len(chunk), name.encode()) or lib.lua_pcall(L, 0, 1, 0):
            n = ctypes.c_size_t()
            err = lib.lua_tolstring(L, -1, ctypes.byref(n))
            raise RuntimeError(ctypes.string_at(err, n.value).decode(errors="replace"))
        n = ctypes.c_size_t()
        got = lib.lua_tolstring(L, -1, ctypes.byref(n))
        out = ctypes.string_at(got, n.value) if got else b""
        lib.lua_settop(L, 0)
        return out

    def call(self, expr: bytes) -> bytes:
        return self._run(b"return tostring(" + expr + b")", "call")

    def submit(self, env: Mapping[str, bytes], script: str = "#!/bin/sh\ntrue\n",
               min_nodes: int = 1, name: str = "job") -> Tuple[int, str, str]:
        entries = b", ".join(literal(k.encode() + b"=" + v) for k, v in env.items())
        chunk = (b"__user = ''\nlocal job = {spank_job_env = {" + entries + b"}, script = " + literal(script.encode())
                 + b", name = " + literal(name.encode())
                 + b", min_nodes = %d, max_nodes = %d}\n" % (min_nodes, min_nodes)
                 + b"local rc = slurm_job_submit(job, {}, 1000)\n"
                 + b"return tostring(rc) .. '\\0' .. (job.admin_comment or '') .. '\\0' .. __user")
        rc, comment, user = self._run(chunk, "submit").split(b"\0")
        return int(rc), comment.decode("utf-8", "replace"), user.decode("utf-8", "replace")

    def close(self) -> None:
        self.lib.lua_close(self.L)
