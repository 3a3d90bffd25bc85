"""The one seam that resets a GPU: `nvidia-smi -r -i N` (lifecycle.remediation.reset_command + the
index), argv only, with a timeout. Run on the node by the validation job, inside the node's maintenance
reservation, so that no job holds the GPU (nvidia-smi refuses a reset while a process uses it)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, Mapping, Optional, Sequence

from slurm_ft.errors import CommandError, UsageError
from slurm_ft.node import state as st
from slurm_ft.runner import Result, run

OUTPUT_MAX = 400   # the reset's own words, for the validation output: bounded

if TYPE_CHECKING:
    from slurm_ft.config import HealthConfig


@dataclass(frozen=True)
class ResetResult:
    gpu: int
    ok: bool
    detail: str

    def to_dict(self) -> Dict[str, object]:
        return {"gpu": self.gpu, "ok": self.ok, "detail": self.detail}


def reset_gpu(gpu: int, command: Sequence[str], timeout_s: float, *, env: Optional[Mapping[str, str]] = None,
              runner: Callable[..., Result] = run) -> ResetResult:
    """Reset GPU `gpu`; a failure (exit status, timeout, missing program) is a result, not an exception."""
    if not 0 <= gpu < 1024:
        raise UsageError(f"--gpu must be a GPU index 0..1023, not {gpu}")
    argv = [*command, str(gpu)]
    try:
        res = runner(argv, timeout=timeout_s, env=env, check=False)
    except CommandError as exc:    # timed out, or the program is missing
        return ResetResult(gpu, False, str(exc)[:OUTPUT_MAX])
    text = " ".join((res.stdout + " " + res.stderr).split())[:OUTPUT_MAX]
    if res.returncode != 0:
        return ResetResult(gpu, False, f"`{' '.join(argv)}` exited {res.returncode}: {text}".strip())
    return ResetResult(gpu, True, text or "reset")


def acknowledge_xids(hc: "HealthConfig", node: str, at: float) -> None:
    """After a successful reset: Xids logged before it were dealt with by it. They stay in the kernel
    log until a reboot; without this the validation's check would fail on them for xid_lookback_s.
    (Node-wide, as the resume acknowledgment in node/run.py: the validation's full check and burn-in
    still judge every GPU by what NVML reads now.)"""
    with st.locked(st.path_for(hc, node), node) as state:
        state["xid_ack"] = max(at, float(state.get("xid_ack") or 0.0))
