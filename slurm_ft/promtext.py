"""Prometheus text exposition, hand-written: one helper for every slurm-ft textfile (the sweep's, the
controller's, each node watcher's), so they all escape labels and print numbers alike.

node_exporter's textfile collector reads `*.prom` files from one directory; each file is replaced by an
atomic rename (fsutil.atomic_write), so it never reads half a file.
"""
from __future__ import annotations

from typing import Iterable, List, Tuple

Sample = Tuple[str, float]          # (rendered label set, value)


class Exposition:
    """Families in the order added, each with its HELP and TYPE lines."""

    def __init__(self) -> None:
        self.lines: List[str] = []

    def family(self, name: str, kind: str, help_: str, samples: Iterable[Sample]) -> None:
        self.lines.append(f"# HELP {name} {help_}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labelset, value in samples:
            self.lines.append(f"{name}{labelset} {num(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def labels(**kv: object) -> str:
    body = ",".join(f'{k}="{escape(str(v))}"' for k, v in kv.items())
    return "{" + body + "}"


def escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def num(v: float) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        return str(int(v))
    return repr(float(v))
