"""`slurm-ft config check [FILE]`: validate a config before it is deployed (CI, Ansible's `validate:`)."""
from __future__ import annotations

import json
from typing import Optional

import click

from slurm_ft.errors import EXIT_USAGE


@click.group("config")
def config_group() -> None:
    """Validate the config file and show the effective config."""


@config_group.command("check")
@click.argument("file", required=False, metavar="[FILE]")
@click.option("--json", "as_json", is_flag=True, help="Print the effective config as JSON instead of YAML.")
@click.option("--node", metavar="NAME",
              help="The node whose paths ({node}) are checked on this host (default: $SLURMD_NODENAME or the "
                   "short hostname).")
@click.pass_context
def check(ctx: click.Context, file: Optional[str], as_json: bool, node: Optional[str]) -> None:
    """Report every error of FILE at once (one line each: file, key, why) and exit 2 if there is one;
    else print the effective config (every key, defaults filled in) and exit 0. Warnings (a disabled
    breaker, a disk path missing here) go to stderr and do not fail. FILE defaults to the config the
    other commands read (--config, $SLURM_FT_CONFIG, /etc/slurm-ft/slurm-ft.yaml)."""
    import yaml   # lazy: only the YAML output needs the dumper
    from slurm_ft.config_check import check_file, effective   # lazy: node/ rules; not for --help
    result = check_file(file or (ctx.obj.get("config_path") if ctx.obj else None), node)
    for line in result.errors:
        click.echo(f"slurm-ft: error: {line}", err=True)
    for line in result.warnings:
        click.echo(f"slurm-ft: warning: {line}", err=True)
    if result.errors or result.config is None:
        n = len(result.errors)
        click.echo(f"slurm-ft: {result.file}: {n} error{'s' if n != 1 else ''}", err=True)
        ctx.exit(EXIT_USAGE)
    assert result.config is not None
    if result.defaults:
        click.echo(f"slurm-ft: no config file at {result.file}: the defaults apply", err=True)
    data = effective(result.config)
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(f"# effective config of {result.file}: every key, defaults filled in")
        click.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120), nl=False)
