"""`slurm-ft sbatch`: submit a fault-tolerant job (requeueable, tagged, {ckpt} resolved at every start)."""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Tuple

import os
import tempfile

import click

from slurm_ft.errors import UsageError
from slurm_ft.job import submit as sub
from slurm_ft.job import trust

if TYPE_CHECKING:
    from slurm_ft.config import Config
    from slurm_ft.slurm.api import SlurmApi
    from slurm_ft.slurm.client import SlurmClient


def _directives(script: str) -> List[str]:
    try:
        with open(script, "rb") as fh:
            text = fh.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return []
    return sub.script_directives(text)


def _config(ctx: click.Context) -> Config:
    from slurm_ft.config import load_config  # lazy: config loads yaml; not for `sbatch --help`
    return load_config((ctx.obj or {}).get("config_path"))


def _client(ctx: click.Context) -> SlurmClient:
    """The client the config asks for (the lab's slurm.conf when it names one)."""
    from slurm_ft.slurm.backend import client_from_config  # lazy: the Slurm backend; not for `sbatch --help`
    return client_from_config(_config(ctx))


def _tag_field(ctx: click.Context, client: SlurmApi) -> str:
    """Where the tag goes: the field the controller trusts (controller.trust; auto: AdminComment where
    slurmctld runs the job_submit policy, i.e. JobSubmitPlugins=lua)."""
    setting = _config(ctx).controller.trust
    return trust.resolve(setting, client.job_submit_plugins() if setting == "auto" else ())


MODE_NOTES = {
    "admin_comment": "submitted through the slurm-ft plugin: sbatch --ft-* options, the tag in AdminComment "
                     "(job_submit policy)",
    "comment": "submitted without the slurm-ft plugin: the tag in the job's Comment",
}


@click.command("sbatch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False,
                                          "help_option_names": ["--help"]})
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def sbatch(ctx: click.Context, argv: Tuple[str, ...]) -> None:
    """Submit SCRIPT as a fault-tolerant job.

    \b
    slurm-ft sbatch [--ckpt-dir DIR] [--min-nodes M] [--max-restarts K] [--hot-spares K] [--replica-groups R]
                    [--hang-timeout S] [--ckpt-fails M] [SBATCH-OPTIONS...] SCRIPT [ARGS...]

    --hot-spares K: K nodes beside the N that train; a failed node's step is relaunched on one in the
    allocation. --replica-groups R: the job trains as R torchft replica groups of N / R nodes (the
    supervisor runs the Lighthouse); a fault stops and relaunches its group alone (docs/jobs.md).
    --hang-timeout S: no slurm_ft.progress() report for S seconds is a hang (checks, then relaunch or
    restart in place; docs/jobs.md). --ckpt-fails M (3): a checkpoint the job failed on M starts in a
    row is passed over for the previous one.

    The job is submitted with --requeue (--requeue=expedite on Slurm >= 25.11 with enable_expedited_requeue)
    and a slurm-ft tag, so the controller may requeue it on a spare node: where the slurm-ft plugins are
    installed (controller.trust), as sbatch --ft-* options that the job_submit policy turns into the tag
    in AdminComment; elsewhere in the job's Comment. It says on stderr which it used. Every `{ckpt}` in SCRIPT or ARGS becomes, at every (re)start, the
    newest complete checkpoint in DIR (empty on the first start); SLURM_FT_CKPT holds the same. SCRIPT and ARGS are passed
    as an argv array, never through a shell. #SBATCH lines at the top of SCRIPT are honoured as by sbatch.
    Prints `Submitted batch job N` (only N with --parsable).
    """
    req = sub.parse(list(argv), cwd=os.getcwd())
    for warning in req.warnings():
        click.echo(f"slurm-ft: warning: {warning}", err=True)
    directives = _directives(req.script) if os.path.isabs(req.script) else []
    if os.path.isabs(req.script):
        with open(req.script, "rb") as fh:
            head = fh.read(2)
        if head != b"#!" and not os.access(req.script, os.X_OK):
            raise UsageError(f"{req.script}: a batch script must start with #! (or be executable)")
    # sbatch copies the script's contents into the job at submit time, so the file is only needed until then.
    client = _client(ctx)
    field = _tag_field(ctx, client)
    inside = sub.inside_starter(req, field)
    fd, path = tempfile.mkstemp(prefix="slurm-ft-start-", suffix=".py")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(sub.starter_script(directives, argv=inside))
        os.chmod(path, 0o700)
        requeue = client.requeue_option()    # --requeue=expedite only where slurmctld enables it
        job_id = client.submit(sub.sbatch_argv(req, path, requeue, via=field))
    finally:
        os.unlink(path)
    click.echo(f"slurm-ft: {MODE_NOTES[field]}", err=True)
    click.echo(str(job_id) if req.parsable else f"Submitted batch job {job_id}")
