"""`slurm-ft lab ...`: a real Slurm cluster on this machine for tests, demos and benchmarks.

`lab` is a lazy group like the top-level one: other modules add a subcommand with one line in
SUBCOMMANDS; one whose module is not importable (not written yet) is left out of `lab --help`.
"""
from __future__ import annotations

import importlib
import json
import os
from dataclasses import replace

import click

# name -> "module:attribute"
SUBCOMMANDS = {
    "up": "slurm_ft_lab.cli:up",
    "down": "slurm_ft_lab.cli:down",
    "status": "slurm_ft_lab.cli:status",
    "env": "slurm_ft_lab.cli:env",
    "inject": "slurm_ft_lab.cli.inject:inject",
    "heal": "slurm_ft_lab.cli.inject:heal",
    "demo": "slurm_ft_lab.cli.demo:demo",
    "users": "slurm_ft_lab.cli:users_cmd",
    "as-user": "slurm_ft_lab.cli:as_user",
}


def _load(name: str):
    target = SUBCOMMANDS.get(name)
    if target is None:
        return None
    module, attr = target.split(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):   # the module itself is missing, not a bug in it
            return None
        raise
    return getattr(mod, attr, None)


class LazyLabGroup(click.Group):
    def list_commands(self, ctx):
        return sorted(n for n in SUBCOMMANDS if _load(n) is not None)

    def get_command(self, ctx, name):
        return _load(name)


dir_option = click.option("--dir", "directory", metavar="PATH", envvar="SLURM_FT_LAB",
                          help="Lab directory (default /tmp/slurm-ft-lab, or $SLURM_FT_LAB).")


@click.group("lab", cls=LazyLabGroup)
def lab() -> None:
    """A real Slurm cluster on this machine (munge, slurmctld, one slurmd per node, fake GPUs)."""


@lab.command("up")
@dir_option
@click.option("--nodes", type=int, help="Worker nodes, partition train  [default: 64]")
@click.option("--spares", type=int, help="Spare nodes, partition spares  [default: 4]")
@click.option("--gpus-per-node", type=int, help="[default: 8]")
@click.option("--cpu-nodes", type=int, help="Nodes without GPUs (no gpu GRES, no NVML), cpu001.., partition cpu "
                                            "(a mixed cluster)  [default: 0]")
@click.option("--port-base", type=int, help="slurmctld port; slurmd i listens on port-base + i  [default: 17000]")
@click.option("--health-interval", type=int,
              help="HealthCheckInterval in seconds, every node once per interval, cycled  [default: 300]")
@click.option("--slurmd-timeout", type=int, help="SlurmdTimeout: a dead slurmd is NOT_RESPONDING after this  [default: 10]")
@click.option("--fast-hooks/--full-hooks", default=None,
              help="LAB ONLY: prolog, epilog and health check skip the python check on nodes with untouched fake "
                   "GPUs (for 1,000+ node labs on a few cores)  [default: full]")
@click.option("--plugin/--no-plugin", default=None,
              help="Load slurm-ft's SPANK plugin (sbatch --ft-*) and job_submit policy (needs gcc, make, "
                   "libslurm-dev)  [default: no]")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for every node to be idle.")
def up(directory, nodes, spares, gpus_per_node, cpu_nodes, port_base, health_interval, slurmd_timeout, fast_hooks,
       plugin, timeout) -> None:
    """Start the lab (a running one is left as it is) and wait until every node is idle.

    Options not given keep the values this lab directory was last brought up with.
    """
    from slurm_ft_lab.cluster import Lab  # lazy: each lab command loads what it runs, as slurm-ft's own cli/ does
    given = {"nodes": nodes, "spares": spares, "gpus_per_node": gpus_per_node, "port_base": port_base,
             "health_interval_s": health_interval, "slurmd_timeout_s": slurmd_timeout, "fast_hooks": fast_hooks,
             "plugin": plugin, "cpu_nodes": cpu_nodes}
    base = Lab(directory).spec                 # saved spec of this directory, or the defaults
    spec = replace(base, **{k: v for k, v in given.items() if v is not None})
    the_lab = Lab(directory, spec)
    res = the_lab.up(timeout=timeout)
    spec = the_lab.spec
    what = "already up" if res.already_running else "up"
    click.echo(f"lab {what} in {the_lab.dir}: {spec.nodes} nodes in train, {spec.spares} in spares, "
               f"gpu:{spec.gpus_per_node} each, {f'{spec.cpu_nodes} in cpu (no GPUs), ' if spec.cpu_nodes else ''}"
               f"slurmctld port {spec.port_base}"
               f"{', slurm-ft plugins loaded' if spec.plugin else ''} ({res.elapsed_s:.1f} s)")
    click.echo(f"use it:  eval $(slurm-ft lab env --dir {the_lab.dir})")


@lab.command("down")
@dir_option
def down(directory) -> None:
    """Stop every daemon this lab started (by pid) and any job steps they left.

    The lab's job users stay (every lab on this machine shares them), and so does the search permission
    `lab up` gave them on a directory others cannot enter (root's home): `slurm-ft lab users --remove`."""
    from slurm_ft_lab.cluster import Lab  # lazy: each lab command loads what it runs
    the_lab = Lab(directory)
    stopped = the_lab.down()
    click.echo(f"lab in {the_lab.dir}: stopped {len(stopped)} process(es)" if stopped
               else f"lab in {the_lab.dir}: nothing was running")


@lab.command("status")
@dir_option
@click.option("--json", "as_json", is_flag=True, help="Daemons with pids and the sinfo summary, as JSON.")
@click.pass_context
def status(ctx, directory, as_json) -> None:
    """Daemons of the lab and what sinfo says. Exit 1 when the lab is not running."""
    from slurm_ft_lab.cluster import Lab  # lazy: each lab command loads what it runs
    st = Lab(directory).status()
    if as_json:
        click.echo(json.dumps(st, indent=2))
    else:
        slurmds = [d for d in st["daemons"] if d["name"] == "slurmd"]
        up_slurmds = sum(1 for d in slurmds if d["alive"])
        others = ", ".join(f"{d['name']} {d['pid'] if d['alive'] else 'not running'}"
                           for d in st["daemons"] if d["name"] != "slurmd")
        click.echo(f"lab {st['dir']}: {'running' if st['running'] else 'not running'}")
        click.echo(f"  {others}, slurmd {up_slurmds}/{len(slurmds)}")
        names = [u["name"] for u in st["users"]]
        click.echo(f"  jobs run as {st['job_user']}; lab users: "
                   f"{_name_range(names) if names else 'none yet (`lab up` creates them)'}")
        click.echo(f"  RPC rate limiter: {st['rate_limiter']}")
        for row in st["sinfo"]:
            click.echo(f"  {row['partition']:<8} {row['state']:<10} {row['nodes']:>4}  {row['gres']:<8} {row['nodelist']}")
        if st.get("sinfo_error"):
            click.echo(f"  sinfo: {st['sinfo_error']}")
    if not st["running"]:
        ctx.exit(1)


def _name_range(names) -> str:
    return f"{names[0]} .. {names[-1]} ({len(names)})" if len(names) > 2 else ", ".join(names)


@lab.command("users")
@click.option("--remove", is_flag=True, help="Delete the lab's users and take back the search permission (ACL) "
                                            "`lab up` gave them (refused while a process runs as one).")
@click.option("--json", "as_json", is_flag=True, help="Name and uid of each, as JSON.")
def users_cmd(remove, as_json) -> None:
    """The lab's job users (slurmft-u0 .. slurmft-u9): machine-wide accounts that `lab up` creates and
    every lab shares; jobs of the tests, `lab demo` and the bench run as slurmft-u0."""
    from slurm_ft_lab import users  # lazy: each lab command loads what it runs
    if remove:
        gone = users.remove()
        click.echo(f"removed {len(gone)} lab user(s)" + (f": {', '.join(gone)}" if gone else ""))
        return
    have = users.existing()
    if as_json:
        click.echo(json.dumps([{"name": u.name, "uid": u.uid, "default": u.name == users.DEFAULT} for u in have]))
        return
    if not have:
        click.echo("no lab users yet (`slurm-ft lab up` creates them)")
    for u in have:
        click.echo(f"{u.name:<12} uid {u.uid}{'  (jobs run as this user)' if u.name == users.DEFAULT else ''}")


@lab.command("as-user", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@dir_option
@click.option("--user", "-u", "user", metavar="NAME", help="A lab user  [default: slurmft-u0]")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def as_user(directory, user, command) -> None:
    """Run COMMAND as a lab job user with the lab's environment (`sbatch`, `squeue`, `slurm-ft sbatch`...):
    what a user of a cluster can and cannot do."""
    from slurm_ft_lab.cluster import Lab  # lazy: each lab command loads what it runs
    the_lab = Lab(directory)
    argv = the_lab.user_argv(list(command), user)
    env = the_lab.user_env(user)
    os.chdir(the_lab.user_home(user or the_lab.job_user))
    os.execvpe(argv[0], argv, env)


@lab.command("env")
@dir_option
def env(directory) -> None:
    """Print `export` lines so that sinfo, sbatch and slurm-ft talk to the lab."""
    # lazy: each lab command loads what it runs
    from slurm_ft_lab.cluster import CHECK_SOCKET_ENV, QUERY_SOCKET_ENV, Lab
    the_lab = Lab(directory)
    click.echo(f"export SLURM_CONF={the_lab.conf}")
    click.echo(f"export SLURM_FT_CONFIG={the_lab.config_path}")
    click.echo(f"export SLURM_FT_LAB={the_lab.dir}")
    click.echo(f"export {CHECK_SOCKET_ENV}='{the_lab.check_socket}'")
    click.echo(f"export {QUERY_SOCKET_ENV}='{the_lab.query_socket}'")
