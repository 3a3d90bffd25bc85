#!/usr/bin/env bash
# Install what slurm-ft needs on a fresh Debian/Ubuntu machine, as root:
#   apt: slurm-wlm, munge, a C compiler and make (the lab's fake NVML, the SPANK plugin), libslurm-dev
#        (spank.h, for the plugin), python3 with venv
#   pip: slurm-ft with its test, torch (CPU, for the DDP lab job) and torchft (the replica-group lab job) extras,
#        the peers extra (nvidia-resiliency-ext: bench/peers.py) and the lab (lab/), into ./.venv (Debian's
#        system Python refuses pip installs)
# Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")"

if [ "$(id -u)" != 0 ]; then
  echo "setup.sh: run as root: it installs apt packages and the lab starts Slurm daemons" >&2
  exit 4
fi

missing=()
# A Slurm already here is used as it is, Debian's or a site's own build (never Debian's package over it).
if command -v slurmctld >/dev/null; then
  dpkg -S "$(command -v slurmctld)" >/dev/null 2>&1 ||
    echo "setup.sh: using the Slurm installed here, not from a Debian package: $(slurmctld -V) ($(command -v slurmctld))"
else
  missing+=(slurm-wlm)
fi
command -v munged >/dev/null || missing+=(munge)
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
command -v make >/dev/null || missing+=(make)
# setfacl: a checkout where others cannot enter (root's home, /root 0700) is opened to the lab's job users
# alone, by `lab up` (lab/slurm_ft_lab/users.py)
command -v setfacl >/dev/null || missing+=(acl)
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
# What is asked is the interpreter the venv runs on, not .venv's own path: a checkout in root's home
# (/root 0700) is out of others' reach whatever builds .venv, and `lab up` lets the lab's users alone in
# (an ACL: lab/slurm_ft_lab/users.py), so building .venv again would change nothing.
runs_for_others() {
  setpriv --reuid=nobody --regid=nogroup --clear-groups "$1" -c \
    'import os, sys; os.stat(os.path.realpath(sys.executable)); os.stat(os.path.join(sys.base_prefix, "lib"))' 2>/dev/null
}
venv_base() {
  .venv/bin/python -c 'import os, sys; print(os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable))'
}
if [ -x .venv/bin/python ] && ! runs_for_others "$(venv_base)"; then
  echo "setup.sh: .venv's Python ($(venv_base)) cannot be run by other users: building .venv again"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  py=python3
  if ! runs_for_others "$(command -v python3)" && [ -x /usr/bin/python3 ] && runs_for_others /usr/bin/python3; then
    py=/usr/bin/python3
  fi
  "$py" -m venv .venv
  runs_for_others "$(venv_base)" ||
    echo "setup.sh: warning: other users cannot run $(venv_base): the lab's jobs (run as slurmft-u0...) will not start" >&2
fi
# the lab (lab/: Slurm on this machine, fake GPUs, the demo) is its own project, for development only
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' -e ./lab
# torch (CPU) runs the real DDP job of the checkpoint tests. Not every index has a build for every
# Python: without one, those tests report as skipped (with this reason), the rest of the suite runs.
if ! .venv/bin/python -c 'import torch' 2>/dev/null &&
   ! .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[torch]' >.venv/torch-install.log 2>&1; then
  echo "setup.sh: no torch for $(.venv/bin/python -V) from the package index (.venv/torch-install.log): the torch tests will be skipped" >&2
fi
# torchft (the replica-group lab job and its Lighthouse): installed after torch, whose CPU build it keeps
# (torchft==0.2.0 needs torch>=2.7). Without a build for this Python, its tests report as skipped.
if .venv/bin/python -c 'import torch' 2>/dev/null && ! .venv/bin/python -c 'import torchft' 2>/dev/null &&
   ! .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[torchft]' >.venv/torchft-install.log 2>&1; then
  echo "setup.sh: no torchft for $(.venv/bin/python -V) from the package index (.venv/torchft-install.log): the replica-group tests will be skipped" >&2
fi
# bench/peers.py's contenders (NVIDIA's ft_launcher, torchft): on top of that torch, never another one.
# Without them, the peers' lab test is skipped with this reason; the rest of the suite runs.
if .venv/bin/python -c 'import torch' 2>/dev/null &&
   ! .venv/bin/python -c 'import nvidia_resiliency_ext' 2>/dev/null &&
   ! .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[peers]' >.venv/peers-install.log 2>&1; then
  echo "setup.sh: no nvidia-resiliency-ext for $(.venv/bin/python -V) (.venv/peers-install.log): the peers' test will be skipped" >&2
fi
# pyslurm (the pyslurm backend): a release speaks to one Slurm major.minor only, and PyPI has 25.11's
# alone; it builds (Cython) against the installed Slurm's headers and libslurm, and needs Python's headers.
mm=$(slurmctld -V | awk '{ split($2, v, "."); print v[1] "." v[2] }')
if ! .venv/bin/python -c 'import pyslurm' 2>/dev/null; then
  versions=$(.venv/bin/python -m pip index versions --disable-pip-version-check pyslurm 2>/dev/null |
             sed -n 's/^Available versions://p' | tr -d ',' || true)
  if [[ " $versions " == *" $mm."* ]]; then
    py_h=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h
    if [ ! -e "$py_h" ]; then
      echo "setup.sh: apt-get install python3-dev (pyslurm builds against Python's headers)"
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-dev >/dev/null
    fi
    lib=$(ldconfig -p | awk '$1 == "libslurm.so" { print $NF; exit }')
    SLURM_INCLUDE_DIR=/usr/include SLURM_LIB_DIR=$(dirname "${lib:-/usr/lib/libslurm.so}") \
      .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[pyslurm]" "pyslurm==$mm.*" \
      >.venv/pyslurm-install.log 2>&1 ||
      echo "setup.sh: pyslurm for Slurm $mm did not build (.venv/pyslurm-install.log): its backend's tests will be skipped" >&2
  else
    echo "setup.sh: no pyslurm release for Slurm $mm: the pyslurm backend's tests will be skipped"
  fi
fi
# the SPANK plugin (sbatch --ft-*): spank/slurm_ft.so, for plugstack.conf (README: "The Slurm plugins")
make -s -C spank
echo "setup.sh: ready ($(.venv/bin/slurm-ft --version), $(slurmctld -V))"
