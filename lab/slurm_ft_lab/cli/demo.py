"""`slurm-ft lab demo [--json]`: the scenario slurm-ft exists for, on the lab, with its timeline.

A 512-GPU trainer job (64 nodes x 8) with 4 spares, a fatal Xid on one GPU mid-run; `slurm-ft watch`
drains the node, the controller swaps a spare in and requeues the job at once, and the trainer resumes
from its latest complete checkpoint. The timeline is printed as it happens.
"""
from __future__ import annotations

import json
import logging

import click

from slurm_ft.errors import UsageError


@click.command("demo")
@click.option("--dir", "directory", metavar="PATH", envvar="SLURM_FT_LAB",
              help="Lab directory (default /tmp/slurm-ft-lab, or $SLURM_FT_LAB); brought up if needed.")
@click.option("--nodes", default=None, type=int, help="Worker nodes (the job uses all of them).  [default: 64; "
              "with --replica-groups R: R x 2 + K]")
@click.option("--spares", default=4, show_default=True, help="Spare nodes.")
@click.option("--gpus-per-node", default=8, show_default=True)
@click.option("--port-base", default=17000, show_default=True, help="For a lab brought up here.")
@click.option("--step-time", default=0.5, show_default=True, help="Seconds per training step.")
@click.option("--ckpt-every", default=5, show_default=True, help="Checkpoint every K steps.")
@click.option("--gpu", "gpu", default=3, show_default=True, help="GPU index that fails.")
@click.option("--xid", default=79, show_default=True, help="The fatal Xid injected.")
@click.option("--keep", is_flag=True, help="Leave the recovered job running (default: cancel it at the end).")
@click.option("--timeout", default=600.0, show_default=True, help="Give up after this many seconds per phase.")
@click.option("--hot-spares", default=None, type=click.IntRange(0, 8),
              help="Hot spare nodes held in the job (the in-allocation path; 0 = the requeue path).  [default: 0; "
                   "with --replica-groups: 1]")
@click.option("--replica-groups", default=0, show_default=True, type=click.IntRange(0, 16),
              help="Train as R torchft replica groups (FT-DDP over gloo, slurm_ft_lab.ftddp; needs torch and "
                   "torchft): a fault restarts only its group. The job uses --nodes (default R x 2 + K) with "
                   "--hot-spares K (default 1) of them idle; 0 = one gang.")
@click.option("--planned", is_flag=True,
              help="No fault: corrected ECC errors climb on one GPU (a soft signal); the job moves to a hot spare "
                   "at a checkpoint it is asked for, no step redone (a planned swap; --hot-spares 1 unless given).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object at the end instead of the timeline.")
@click.option("--via", type=click.Choice(["wrapper", "plugin"]), default="wrapper", show_default=True,
              help="Submit with `slurm-ft sbatch`, or through slurm-ft's Slurm plugins (the lab comes up with "
                   "--plugin): plain `sbatch --ft-ckpt-dir`, or `slurm-ft sbatch` with --hot-spares.")
def demo(directory, nodes, spares, gpus_per_node, port_base, step_time, ckpt_every, gpu, xid, keep, timeout,
         hot_spares, replica_groups, planned, as_json, via) -> None:
    """Run a 64-node trainer, break one GPU mid-run, and watch slurm-ft bring the job back on a spare."""
    from slurm_ft_lab.cluster import Lab, LabSpec  # lazy: each lab command loads what it runs
    from slurm_ft_lab.scenario import Scenario  # lazy: each lab command loads what it runs

    if planned and replica_groups:
        raise UsageError("--planned moves a hot-spare job's whole step; a replica group's planned swap is not built")
    if hot_spares is None:
        hot_spares = 1 if replica_groups else 0
    if nodes is None:
        nodes = replica_groups * 2 + hot_spares if replica_groups else 64
    job_nodes = nodes                    # a replica-group job's size (the gang demo uses the whole lab)
    if replica_groups == 1 or replica_groups and (nodes - hot_spares) % replica_groups:
        raise UsageError(f"--replica-groups {replica_groups}: {nodes - hot_spares} training node(s) must be 2 or more "
                         f"whole groups")
    if spares < 1:
        raise UsageError("the demo needs at least one spare (--spares 1 or more)")
    if not 0 <= gpu < gpus_per_node:
        raise UsageError(f"--gpu must be 0..{gpus_per_node - 1}")
    say = (lambda *a, **k: None) if as_json else click.echo
    # the timeline says what the controller does; its own warnings would only repeat it in between
    logging.getLogger("slurm_ft.fleet.recovery.controller").setLevel(logging.ERROR)
    lab = Lab(directory)                 # a running lab keeps the spec it was brought up with
    already = lab.running()
    plugin = via == "plugin"
    if already and plugin and not lab.spec.plugin:     # (`slurm-ft sbatch` works with or without them)
        raise UsageError(f"the lab in {lab.dir} runs without slurm-ft's plugins; take it down first "
                         f"(slurm-ft lab down --dir {lab.dir}) to run the demo --via plugin")
    if not already:
        lab = Lab(directory, LabSpec(nodes=nodes, spares=spares, gpus_per_node=gpus_per_node, port_base=port_base,
                                     plugin=plugin))
        say(f"bringing the lab up in {lab.dir} ({nodes} nodes x {gpus_per_node} GPUs + {spares} spares) ...")
        lab.up(timeout=120)
    # (a running lab is not waited on here: the scenario resets it, quarantined nodes of a last run included)
    nodes, spares, gpus_per_node = lab.spec.nodes, lab.spec.spares, lab.spec.gpus_per_node
    if spares < 1:
        raise UsageError(f"the lab in {lab.dir} has no spare nodes; bring one up with --spares 1 or more")
    say(f"lab {'already up' if already else 'up'}: {lab.spec.nodes} nodes in `train`, {lab.spec.spares} in `spares`")

    def on_phase(p, fault_t):
        say(f"  +{p.t - fault_t:7.2f} s  {p.name:<17} {p.detail}")

    if planned and not hot_spares:
        hot_spares = 1                   # a planned swap moves the step within the job's own allocation
    if hot_spares >= nodes:
        raise UsageError(f"--hot-spares {hot_spares} leaves no training node of {nodes}")
    if replica_groups:
        if job_nodes > nodes:
            raise UsageError(f"the lab in {lab.dir} has {nodes} nodes in `train`, the job needs {job_nodes}")
        return _groups_demo(lab, job_nodes, replica_groups, hot_spares, step_time, gpu, xid, keep, timeout, as_json, say,
                            on_phase)
    sc = Scenario(lab, lab.dir / "demo", step_time=step_time, ckpt_every=ckpt_every, on_phase=on_phase,
                  hot_spares=hot_spares, planned=planned)
    sc.prepare()
    sc.start_controller()
    try:
        job = sc.submit(nodes, via=via)
        how = ("`slurm-ft sbatch`" if via == "wrapper" else
               "`slurm-ft sbatch` through slurm-ft's plugins" if hot_spares else
               "plain `sbatch --ft-ckpt-dir` (slurm-ft's plugins)")
        train = nodes - hot_spares
        say(f"submitted job {job} as user {lab.job_user}: {train * gpus_per_node}-GPU trainer ({train} nodes x {gpus_per_node}"
            + (f", + {hot_spares} hot spare node(s) in the job" if hot_spares else "")
            + f"), checkpoint every {ckpt_every} steps, via {how} (controller running, journal in "
            f"{sc.work / 'state'})")
        start = sc.wait_event(lambda e: e.get("event") == "start", timeout, "trainer start")
        if planned:
            say(f"training: {start.get('world')} ranks started in {start.get('startup_s', 0):.1f} s; "
                f"after step 7 corrected ECC errors start climbing on GPU {gpu} of one node ...")
        else:
            say(f"training: {start.get('world')} ranks started in {start.get('startup_s', 0):.1f} s; "
                f"a fatal Xid {xid} goes to GPU {gpu} of one node after step 7 ...")
        say("timeline (seconds since the " + ("errors started" if planned else "fault") + "):")
        result = sc.fault(victim_index=nodes // 4, gpu=gpu, xid=xid, timeout=timeout)
    finally:
        sc.stop(cancel=not keep)
    out = result.to_dict()
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    if planned:
        click.echo(f"job {result.job_id}: {result.failed_node} (GPU {gpu}, corrected ECC errors climbing) swapped for "
                   f"hot spare {result.spare_node} at a checkpoint; resumed from step {result.resumed_from_step}, "
                   f"{result.steps_lost} step(s) redone; soft signal to first step on the spare: "
                   f"{result.fault_to_resume_s:.2f} s (no fault, no requeue)")
        click.echo(f"{result.failed_node} stays drained for its planned swap, out of `train` (validated as it is by the "
                   f"next sweep)")
        click.echo(f"the incident:  slurm-ft --config {sc.config_path} incidents")
        if keep:
            click.echo(f"job {result.job_id} keeps running; stop it with: scancel {result.job_id}")
        click.echo(f"take the lab down:  slurm-ft lab down --dir {lab.dir}")
        return
    what = "hot spare" if hot_spares else "spare"
    click.echo(f"job {result.job_id}: {result.failed_node} (GPU {gpu}, Xid {xid}) replaced by {what} "
               f"{result.spare_node}; resumed from step {result.resumed_from_step}, "
               f"{result.steps_lost} step(s) redone; fault to first step after: {result.fault_to_resume_s:.2f} s"
               + (" (no requeue)" if hot_spares else ""))
    click.echo(f"{result.failed_node} stays drained, out of `train` (quarantined)")
    click.echo(f"the incident:  slurm-ft --config {sc.config_path} incidents")
    if keep:
        click.echo(f"job {result.job_id} keeps running; stop it with: scancel {result.job_id}")
    click.echo(f"take the lab down:  slurm-ft lab down --dir {lab.dir}")


def _groups_demo(lab, nodes, groups, hot_spares, step_time, gpu, xid, keep, timeout, as_json, say, on_phase) -> None:
    """A fault in one of R torchft replica groups: only that group restarts (no whole-job requeue phase)."""
    from slurm_ft_lab.groups_scenario import GroupScenario  # lazy: only the replica-group demo
    try:
        import torchft  # noqa: F401  # lazy: only this demo needs it, and torchft is a test extra
    except ImportError:
        raise UsageError("--replica-groups runs torchft's FT-DDP: install torch and torchft (setup.sh does)") from None
    per = (nodes - hot_spares) // groups
    sc = GroupScenario(lab, lab.dir / "demo", replica_groups=groups, hot_spares=hot_spares, step_time=step_time,
                       on_phase=on_phase)
    sc.prepare()
    sc.start_controller()
    try:
        job = sc.submit(nodes)
        say(f"submitted job {job} as user {lab.job_user}: {groups} torchft replica groups of {per} node(s) "
            f"(FT-DDP over gloo) + {hot_spares} hot spare node(s), with `slurm-ft sbatch --replica-groups {groups}`")
        say(f"training: waiting for every group to step in the quorum; then a fatal Xid {xid} goes to GPU {gpu} of a "
            f"node of group 1 ...")
        say("timeline (seconds since the fault):")
        result = sc.fault(victim_group=1, gpu=gpu, xid=xid, timeout=timeout)
    finally:
        sc.stop(cancel=not keep)
    out = result.to_dict()
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"job {result.job_id}: group {result.failed_group} lost {result.failed_node} (GPU {gpu}, Xid {xid}) and "
               f"came back on hot spare {result.spare_node}, in the quorum {result.fault_to_resume_s:.2f} s after the "
               f"fault (healed from a peer; no requeue, no whole-job restart)")
    for g, h in sorted(result.healthy.items()):
        click.echo(f"group {g} trained on: longest step {h['pause_s']:.2f} s around the fault (usual {h['step_s']:.2f} s), "
                   f"{h['steps_lost']} step(s) lost, {h['steps_after']} committed since the fault")
    click.echo(f"GPU-seconds lost to the fault: {result.gpu_seconds_lost():.0f}")
    if keep:
        click.echo(f"job {result.job_id} keeps running; stop it with: scancel {result.job_id}")
    click.echo(f"take the lab down:  slurm-ft lab down --dir {lab.dir}")
