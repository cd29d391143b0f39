#!/usr/bin/env bash
# Debian's Slurm for the Slurm tests (tests/slurm): slurmctld, slurmd, the client commands, munge, and
# accounting (slurmdbd, MariaDB).
# Idempotent: returns at once when every command is already on PATH. The packages' own services are
# never started here; the tests start their own cluster on loopback ports in a temporary folder.
set -euo pipefail
need=(slurmctld slurmd sbatch squeue sinfo scontrol scancel munged slurmdbd sacct sacctmgr mariadbd mariadb-install-db)
missing=0
for c in "${need[@]}"; do
    command -v "$c" >/dev/null 2>&1 || missing=1
done
[ "$missing" -eq 0 ] && exit 0
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi; }
# Debian's packages start their services on install: keep them from doing so (policy-rc.d, exit 101).
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod +x "$policy"
    made_policy=1
fi
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm slurmdbd munge \
    mariadb-server mariadb-client >/dev/null
[ "$made_policy" -eq 1 ] && as_root rm -f "$policy"
for c in "${need[@]}"; do
    command -v "$c" >/dev/null 2>&1 || { echo "install-slurm.sh: $c still missing after installing Slurm and MariaDB" >&2; exit 1; }
done
