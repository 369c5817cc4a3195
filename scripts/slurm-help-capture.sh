#!/bin/bash
# The --usage and --help texts of a Debian root's real sbatch and srun
# (tests/data/slurm-help/<series>/, issue 32), run as root:
#
#   scripts/slurm-help-capture.sh ROOT tests/data/slurm-help/24.11
#
# ROOT: a root made by scripts/platform-root.sh with slurm-client installed
# (under /var/cache/agent-sandbox-roots). From 23.x sbatch --help needs a
# configuration: a throwaway slurm.conf on a tmpfs over ROOT/tmp, in a mount
# namespace of its own (nothing of ROOT or of the host changes).
set -e
root=$1; out=$2
unshare --mount --propagation private bash -c '
set -e
root=$1; out=$2
mount -t tmpfs tmpfs "$root/tmp"
printf "ClusterName=help\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1\nPartitionName=p Nodes=localhost\n" > "$root/tmp/slurm.conf"
for cmd in sbatch srun; do
  { SLURM_CONF=/tmp/slurm.conf chroot "$root" /usr/bin/$cmd --usage; SLURM_CONF=/tmp/slurm.conf chroot "$root" /usr/bin/$cmd --help; } > "$out/$cmd.txt" 2>/dev/null || true
done
' _ "$root" "$out"
