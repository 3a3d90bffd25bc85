"""The XID catalog: what an Xid code means and what to do about it (pure: data in, verdict out).

The table is package data (`slurm_ft/data/xid_catalog.csv`) so that an admin can read and diff it;
this module only loads it and answers questions. Two rules live in code because they are policy:

* an application-caused Xid (category `user_app`: 13, 31, 43, 45, 68, 69) never drains a node,
  whatever a row says;
* an Xid missing from the catalog is treated as a hardware fault (`UNKNOWN_POLICY`): a code we do not
  know most likely comes from a driver newer than the table, and NVIDIA's own device plugin marks a
  GPU unhealthy on every Xid outside its short application list. Missing a real fault costs a whole
  job; a needless drain costs one node for one validation cycle, and the drain-rate breaker bounds
  how many nodes a bad rule can take out.

Some codes carry a severity word in their log line (NVLink5's 144-150: `Fatal`/`Nonfatal`); the row's
`tokens` column says what each word means, so a new range of such codes is rows, not code.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from slurm_ft.finding import Action

from slurm_ft.gpu.sample import XidEvent

CATALOG_PATH = Path(__file__).resolve().parent.parent / "data" / "xid_catalog.csv"

SEVERITIES = ("ignore", "warn", "fail")
ACTIONS = tuple(a.value for a in Action)

# What the admin does next, per action (printed by `slurm-ft xid explain`).
ADVICE = {
    "none": "no action on the node; note it and watch this GPU for repeats",
    "reset_gpu": "drain; reset the GPU once idle (nvidia-smi -r -i N) or reboot; RMA if it recurs",
    "reboot": "drain and reboot the node; RMA if it recurs after reboot",
    "rma": "drain; run the field diagnostic and open an RMA",
    "drain": "drain and inspect the node before returning it",
}

_TOKEN_RULE = re.compile(r"([A-Za-z][A-Za-z_]*)=([a-z]+)/([a-z_]+)")


@dataclass(frozen=True)
class TokenRule:
    """A word of the log line and the verdict it gives (a row's `tokens` column: `WORD=severity/action`)."""
    word: str
    severity: str
    action: str


@dataclass(frozen=True)
class XidInfo:
    xid: int
    name: str
    category: str          # hardware, driver, memory, nvlink, user_app, other, unknown
    severity: str          # ignore | warn | fail
    action: str            # none | reset_gpu | reboot | rma | drain
    drains: bool
    source: str = ""
    known: bool = True
    tokens: Tuple[TokenRule, ...] = ()

    @property
    def user_caused(self) -> bool:
        return self.category == "user_app"

    @property
    def advice(self) -> str:
        if self.user_caused:
            return ("caused by the application (or a follow-on of another Xid): no action on the node; "
                    "if the job died, look at its code and the Xid logged before this one")
        if self.severity == "ignore":
            return "informational: no action on the node"
        return ADVICE[self.action]

    def to_dict(self) -> Dict[str, object]:
        return {
            "xid": self.xid, "name": self.name, "category": self.category, "severity": self.severity,
            "action": self.action, "drains": self.drains, "user_caused": self.user_caused,
            "known": self.known, "advice": self.advice, "source": self.source,
        }


def unknown_policy(xid: int) -> XidInfo:
    """The verdict for a code missing from the catalog (see the module docstring for why)."""
    return XidInfo(xid, f"Xid {xid} (not in the slurm-ft catalog; newer driver?)", "unknown", "fail",
                   "drain", True, "slurm-ft default for unknown Xids", known=False)


class CatalogError(ValueError):
    pass


def parse_tokens(text: str) -> Tuple[TokenRule, ...]:
    """A row's `tokens` column; ValueError names what is wrong."""
    rules: List[TokenRule] = []
    for item in text.split():
        m = _TOKEN_RULE.fullmatch(item)
        if not m:
            raise ValueError(f"token rule {item!r} is not WORD=severity/action")
        rule = TokenRule(*m.groups())
        if rule.severity not in SEVERITIES or rule.action not in ACTIONS:
            raise ValueError(f"token rule {item!r}: bad severity/action")
        if rule.word in (r.word for r in rules):
            raise ValueError(f"token {rule.word!r} listed twice")
        rules.append(rule)
    return tuple(rules)


def load_catalog(path: Path = CATALOG_PATH) -> Dict[int, XidInfo]:
    """Read and check the catalog file; a malformed row raises CatalogError naming the line."""
    table: Dict[int, XidInfo] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        lines = [ln for ln in fh if not ln.startswith("#")]
    for lineno, row in enumerate(csv.DictReader(lines), start=2):
        try:
            info = XidInfo(
                xid=int(row["xid"]), name=row["name"].strip(), category=row["category"].strip(),
                severity=row["severity"].strip(), action=row["action"].strip(),
                drains={"yes": True, "no": False}[row["drains"].strip()], source=row.get("source") or "",
                tokens=parse_tokens(row["tokens"] or ""),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise CatalogError(f"{path}: row {lineno}: {exc!r}") from exc
        if info.severity not in SEVERITIES or info.action not in ACTIONS:
            raise CatalogError(f"{path}: row {lineno}: bad severity/action {info.severity}/{info.action}")
        if info.drains != (info.severity == "fail"):
            raise CatalogError(f"{path}: row {lineno}: drains must be yes exactly when severity is fail")
        if info.xid in table:
            raise CatalogError(f"{path}: row {lineno}: Xid {info.xid} listed twice")
        # the policy in the module docstring, enforced on load
        if info.user_caused and (info.drains or any(t.severity == "fail" for t in info.tokens)):
            raise CatalogError(f"{path}: row {lineno}: user_app Xid {info.xid} must not drain")
        table[info.xid] = info
    return table


@lru_cache(maxsize=1)
def catalog() -> Dict[int, XidInfo]:
    return load_catalog()


def lookup(xid: int) -> XidInfo:
    """Catalog entry for a code; the unknown-Xid policy when it is not listed."""
    return catalog().get(xid) or unknown_policy(xid)


def is_known(xid: int) -> bool:
    return xid in catalog()


def verdict(event: XidEvent) -> XidInfo:
    """What one logged Xid means, using the line's detail where the code alone does not decide."""
    if event.kind == "forged":      # an Xid-looking line the kernel did not write (see gpu.kmsg)
        return XidInfo(event.xid, f"suspicious Xid {event.xid} line not written by the kernel", "forged", "warn",
                       "none", False, "slurm-ft: only kernel records report Xids", known=False)
    if not event.trusted:           # a syslog line: the kernel's, or `logger -t kernel`'s (see gpu.kmsg)
        info = verdict(replace(event, trusted=True))
        if info.severity != "fail":
            return info
        # the action stays the catalog's: what the fault would need, were it real (`xid explain`)
        return replace(info, name=f"{info.name} (unverified: a syslog line, which any user's `logger -t kernel` "
                                  f"can write; drains when NVML reports it too)", severity="warn", drains=False)
    info = lookup(event.xid)
    if event.kind == "sxid":
        # NVSwitch errors are not GPU Xids; the catalog does not cover them, report without draining.
        fatal = bool(re.search(r"\bFatal\b", event.detail))
        return XidInfo(event.xid, f"NVSwitch SXid {event.xid} ({'fatal' if fatal else 'non-fatal'})",
                       "nvswitch", "warn", "none", False, "NVSwitch kernel log (not a GPU Xid)", known=False)
    rule = token_in(info, event.detail)
    return replace(info, severity=rule.severity, action=rule.action, drains=rule.severity == "fail") if rule else info


def token_in(info: XidInfo, detail: str) -> Optional[TokenRule]:
    """The rule of the first of the row's words that the log line holds (as a whole word), if any."""
    rules = {t.word: t for t in info.tokens}
    return next((rules[w] for w in re.findall(r"\w+", detail) if w in rules), None) if rules else None


def drained_action(xid: int) -> str:
    """What a node drained for this Xid needs: the row's action, or for a row that drains only on a token
    of its log line (NVLink5's 147, 148: `Fatal`), that token's."""
    info = lookup(xid)
    return info.action if info.drains else next((t.action for t in info.tokens if t.severity == "fail"), info.action)
