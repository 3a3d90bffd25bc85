#!/usr/bin/env bash
# Install what slurm-ft needs on a fresh Debian/Ubuntu machine, as root:
#   apt: slurm-wlm, munge, a C compiler and make (the lab's fake NVML, the SPANK plugin), libslurm-dev
#        (spank.h, for the plugin), python3 with venv
#   pip: slurm-ft with its test and torch (CPU, for the DDP lab job) extras, and the lab (lab/), into ./.venv (Debian's system Python refuses pip installs)
# Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")"

if [ "$(id -u)" != 0 ]; then
  echo "setup.sh: run as root: it installs apt packages and the lab starts Slurm daemons" >&2
  exit 4
fi

missing=()
command -v slurmctld >/dev/null || missing+=(slurm-wlm)
command -v munged >/dev/null || missing+=(munge)
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
command -v make >/dev/null || missing+=(make)
[ -e /usr/include/slurm/spank.h ] || missing+=(libslurm-dev)
if ! command -v python3 >/dev/null; then
  missing+=(python3 python3-venv)        # Debian's python3 has no ensurepip without python3-venv
elif ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  missing+=(python3-venv)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The lab runs jobs as unprivileged users (slurmft-u*), as a cluster does: they must be able to run
# .venv's Python. One under a directory others cannot enter (a pyenv in /root) will not do: then
# Debian's /usr/bin/python3 builds the venv, and a venv built on such a Python is built again.
# (the interpreter's own file: where others cannot reach it, it may still start, on another stdlib)
runs_for_others() {
  setpriv --reuid=nobody --regid=nogroup --clear-groups "$1" -c \
    'import os, sys; os.stat(os.path.realpath(sys.executable)); os.stat(os.path.join(sys.base_prefix, "lib"))' 2>/dev/null
}
if [ -x .venv/bin/python ] && ! runs_for_others .venv/bin/python; then
  echo "setup.sh: .venv's Python ($(readlink -f .venv/bin/python)) cannot be run by other users: building .venv again"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  py=python3
  if ! runs_for_others "$(command -v python3)" && [ -x /usr/bin/python3 ] && runs_for_others /usr/bin/python3; then
    py=/usr/bin/python3
  fi
  "$py" -m venv .venv
  runs_for_others .venv/bin/python ||
    echo "setup.sh: warning: other users cannot run $(readlink -f .venv/bin/python): the lab's jobs (run as slurmft-u0...) will not start" >&2
fi
# the lab (lab/: Slurm on this machine, fake GPUs, the demo) is its own project, for development only
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' -e ./lab
# torch (CPU) runs the real DDP job of the checkpoint tests. Not every index has a build for every
# Python: without one, those tests report as skipped (with this reason), the rest of the suite runs.
if ! .venv/bin/python -c 'import torch' 2>/dev/null &&
   ! .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[torch]' >.venv/torch-install.log 2>&1; then
  echo "setup.sh: no torch for $(.venv/bin/python -V) from the package index (.venv/torch-install.log): the torch tests will be skipped" >&2
fi
# the SPANK plugin (sbatch --ft-*): spank/slurm_ft.so, for plugstack.conf (README: "The Slurm plugins")
make -s -C spank
echo "setup.sh: ready ($(.venv/bin/slurm-ft --version), $(slurmctld -V))"
