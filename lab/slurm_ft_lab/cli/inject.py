"""`slurm-ft lab inject` and `slurm-ft lab heal`: break and repair a lab node's fake GPUs."""
from __future__ import annotations

import json
from typing import Optional

import click

from slurm_ft.errors import UsageError
from slurm_ft_lab import inject as lab_inject

_DIR_HELP = "Lab directory (default $SLURM_FT_LAB, else /tmp/slurm-ft-lab)."


@click.command("inject")
@click.argument("node")
@click.option("--gpu", type=int, default=0, show_default=True, help="GPU index on the node.")
@click.option("--xid", type=int, metavar="CODE", help="Log an Xid (and deliver it as an NVML event).")
@click.option("--ecc-dbe", is_flag=True, help="Double-bit ECC error (volatile+aggregate uncorrected, Xid 48).")
@click.option("--ecc-sbe-rate", metavar="N/min",
              help="Corrected ECC errors keep coming at this rate (N/min, N/s or N/h; 0 stops them): a soft signal.")
@click.option("--remap-pending", is_flag=True, help="Row remapping pending (Xid 63).")
@click.option("--remap-failure", is_flag=True, help="Row remapping failure (Xid 64).")
@click.option("--nvlink-down", type=int, metavar="LINK", help="Take one NVLink down (Xid 74).")
@click.option("--nvlink-errors", type=int, metavar="LINK",
              help="Grow one NVLink's error counters (replay +1, recovery +1, CRC +100).")
@click.option("--pcie-width", type=int, metavar="W", help="Degrade the PCIe link to xW.")
@click.option("--gpu-lost", is_flag=True, help="GPU falls off the bus: every NVML call fails (Xid 79).")
@click.option("--clock-event", type=click.Choice(sorted(lab_inject.CLOCK_EVENTS)), help="Set a clock event reason.")
@click.option("--slow", type=float, metavar="F", help="Run the SM clock at F x max (0 < F <= 1).")
@click.option("--temp", type=int, metavar="C", help="Set the GPU temperature.")
@click.option("--hang", type=float, metavar="SECONDS", help="Every NVML call on the GPU hangs this long.")
@click.option("--recovery-action", type=click.Choice(sorted(lab_inject.RECOVERY_ACTIONS)),
              help="The driver's GPU recovery action field (R565+), with its Xid 154.")
@click.option("--driver-unloaded", is_flag=True, help="nvmlInit fails with 'Driver Not Loaded' on the node.")
@click.option("--proc", type=int, metavar="PID", help="A compute process that holds the GPU.")
@click.option("--no-log", is_flag=True, help="Change the state only; write no kernel-log line.")
@click.option("--log-only", is_flag=True,
              help="Write the kernel-log line only; the fake driver's state stays (no NVML event, no NVML evidence).")
@click.option("--unresponsive", type=float, metavar="SECONDS",
              help="Stop the node's slurmd this long (SIGSTOP): a network partition or hung host to slurmctld.")
@click.option("--dir", "labdir", metavar="PATH", help=_DIR_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print what was injected as JSON.")
def inject(node: str, gpu: int, xid: Optional[int], ecc_dbe: bool, ecc_sbe_rate: Optional[str], remap_pending: bool,
           remap_failure: bool,
           nvlink_down: Optional[int], nvlink_errors: Optional[int], pcie_width: Optional[int], gpu_lost: bool,
           clock_event: Optional[str], slow: Optional[float], temp: Optional[int], hang: Optional[float],
           recovery_action: Optional[str], driver_unloaded: bool, proc: Optional[int], no_log: bool, log_only: bool,
           unresponsive: Optional[float], labdir: Optional[str], as_json: bool) -> None:
    """Inject one GPU fault into lab NODE: fake NVML state plus the driver's kernel-log line.

    \b
    Examples:
      slurm-ft lab inject gpu003 --gpu 2 --xid 79
      slurm-ft lab inject gpu010 --ecc-dbe
      slurm-ft lab inject gpu010 --gpu 3 --ecc-sbe-rate 600/min
      slurm-ft lab inject gpu011 --gpu 5 --nvlink-down 3
      slurm-ft lab inject gpu012 --slow 0.5 --no-log
      slurm-ft lab inject gpu014 --gpu 3 --xid 79 --log-only
      slurm-ft lab inject gpu013 --unresponsive 25
    """
    if unresponsive is not None:
        from slurm_ft_lab.cluster import Lab  # lazy: only --unresponsive needs the lab's daemons
        the_lab = Lab(str(lab_inject.lab_dir(labdir)))
        lab_inject.node_dir(the_lab.dir, node)          # an unknown node: the usual one-line error
        pid = the_lab.stop_slurmd(node, unresponsive)
        if as_json:
            click.echo(json.dumps({"node": node, "fault": "unresponsive", "seconds": unresponsive, "slurmd_pid": pid}))
        else:
            click.echo(f"{node}: slurmd (pid {pid}) stopped for {unresponsive:g} s")
        return
    chosen = [(name, value) for name, value in (
        ("xid", xid), ("ecc_dbe", ecc_dbe or None), ("ecc_sbe_rate", ecc_sbe_rate), ("remap_pending", remap_pending or None),
        ("remap_failure", remap_failure or None), ("nvlink_down", nvlink_down), ("nvlink_errors", nvlink_errors), ("pcie_width", pcie_width),
        ("gpu_lost", gpu_lost or None), ("clock_event", clock_event), ("slow", slow), ("temp", temp), ("hang", hang),
        ("recovery_action", recovery_action), ("driver_unloaded", driver_unloaded or None), ("proc", proc),
    ) if value is not None]
    if len(chosen) != 1:
        raise UsageError("give exactly one fault: --xid CODE, --ecc-dbe, --ecc-sbe-rate N/min, --remap-pending, --remap-failure, "
                         "--nvlink-down LINK, --nvlink-errors LINK, --pcie-width W, --gpu-lost, --clock-event NAME, "
                         "--slow F, --temp C, --hang S, --recovery-action A, --driver-unloaded or --proc PID")
    if no_log and log_only:
        raise UsageError("--no-log and --log-only exclude each other")
    fault, value = chosen[0]
    done = lab_inject.inject(lab_inject.lab_dir(labdir), node, fault, gpu=gpu, value=value, log=not no_log,
                             driver=not log_only)
    if as_json:
        click.echo(json.dumps({"node": done.node, "gpu": done.gpu, "fault": done.fault,
                               "summary": done.summary, "kmsg": list(done.kmsg)}))
        return
    click.echo(f"{done.node} gpu{done.gpu}: {done.summary}")
    for rec in done.kmsg:
        click.echo(f"  kmsg: {rec}")


@click.command("heal")
@click.argument("node", required=False)
@click.option("--all", "all_nodes", is_flag=True, help="Heal every node of the lab.")
@click.option("--dir", "labdir", metavar="PATH", help=_DIR_HELP)
def heal(node: Optional[str], all_nodes: bool, labdir: Optional[str]) -> None:
    """Give NODE (or --all nodes) healthy GPUs again, an empty kernel log and no slurm-ft health state
    (the reboot of a repair empties /run), as after repair and reboot."""
    if bool(node) == all_nodes:
        raise UsageError("give a NODE or --all")
    d = lab_inject.lab_dir(labdir)
    if all_nodes:
        names = lab_inject.heal_all(d)
        click.echo(f"healed {len(names)} node(s) in {d}")
    else:
        lab_inject.heal(d, node)
        click.echo(f"{node}: healthy GPUs, kernel log emptied, health state forgotten")
