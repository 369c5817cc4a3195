#!/usr/bin/env bash
# A real multi-node Slurm cluster on this one machine (Debian 12's Slurm 22.05 is
# built with MULTIPLE_SLURMD), beside the single-node one of scripts/slurm-cluster.sh
# and never touching it: its own ClusterName, ports, state, spool, logs, pid files and
# job ids, no accounting. Only munged (and its socket) is shared. Run as root.
#
#   scripts/slurm-multinode.sh start         write the config, start slurmctld and the
#                                            nodes (only what is not running), wait
#                                            until every node is idle. Idempotent.
#   scripts/slurm-multinode.sh stop          cancel this cluster's jobs, stop the daemons
#                                            this script started (their pid files) and
#                                            the steps of those slurmd, nothing else
#   scripts/slurm-multinode.sh status        exit 0 only when every node is idle
#   scripts/slurm-multinode.sh run CMD...    run CMD (as root; drop privileges in CMD)
#                                            with this cluster's config at /etc/slurm,
#                                            in a private mount namespace: the login
#                                            side of this cluster
#
# Nodes (all at 127.0.0.1, each slurmd with its own Port, in its own mount and UTS
# namespace: its own hostname and its own /tmp — PMIx fails when nodes share one —
# and this cluster's config bound over /etc/slurm, so every Slurm command a job
# runs there talks to this cluster):
#   n1 n2   partition "multi" (default): ordinary nodes
#   n3      partition "nobwrap": /usr/bin/bwrap is hidden (a node that can only
#           give a weaker backend)
#   n4      partition "noinstall": the agent-sandbox installs are hidden (/opt and
#           $AGENT_SANDBOX_PREFIX): a node where the job's launcher is missing
# n1 and n2 have one GPU each (Gres=gpu:1): a fake device, /dev/agent-sandbox-gpu0
# (the major/minor of /dev/null), made by "start" and removed by "stop".
set -euo pipefail

CLUSTER=asmultinode
CONF_DIR=/etc/agent-sandbox-slurm-multinode      # bound over /etc/slurm where it is used
LOG_DIR=/var/log/slurm-multinode
RUN_DIR=/run/slurm-multinode
SPOOL=/var/spool/slurm-multinode
CTLD_PORT=16817
FIRST_JOB_ID=700000
NODES=(n1 n2 n3 n4)
declare -A NODE_PORT=([n1]=16821 [n2]=16822 [n3]=16823 [n4]=16824)
PREFIX=${AGENT_SANDBOX_PREFIX:-/opt/agent-sandbox}
FAKE_GPU=/dev/agent-sandbox-gpu0

T0=$(date +%s.%N)

say() { printf 'slurm-multinode: %s\n' "$*" >&2; }
# shellcheck source=slurm-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm-lib.sh"


ctld_pidfile() { echo "$RUN_DIR/slurmctld.pid"; }
node_pidfile() { echo "$RUN_DIR/slurmd-$1.pid"; }

# "${IN_CLUSTER[@]}" CMD...: CMD with this cluster's config at /etc/slurm (a private
# mount namespace). The config dir is a positional argument, never shell text.
IN_CLUSTER=(unshare --mount --propagation private --
            /bin/sh -c 'mount --bind "$0" /etc/slurm && exec "$@"' "$CONF_DIR")

write_conf() {
    local host topology node tmp
    host=$(hostname -s)
    # The host's topology (what each slurmd will report), with less memory than it
    # has so the four nodes' claims do not matter.
    topology=$(slurmd -C | sed -n '/^NodeName=/{s/^NodeName=[^ ]* //; s/ *RealMemory=.*//; p}')
    [[ -n $topology ]] || die "slurmd -C printed no NodeName line"
    install -d -m 0755 "$CONF_DIR"
    tmp=$(mktemp "$CONF_DIR/slurm.conf.XXXXXX")
    {
        cat <<EOF
# Written by agent-sandbox scripts/slurm-multinode.sh — a multi-node test cluster on
# one host. Edits are overwritten by the next "start".
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
MailProg=/bin/true
FirstJobId=$FIRST_JOB_ID
StateSaveLocation=$SPOOL/slurmctld
SlurmdSpoolDir=$SPOOL/slurmd-%n
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurmd-%n.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=5
KillWait=5
InactiveLimit=0
Waittime=0
MinJobAge=300
SchedulerType=sched/backfill
SchedulerParameters=sched_min_interval=100000
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
GresTypes=gpu

EOF
        for node in "${NODES[@]}"; do
            local gres=""
            [[ $node == n[12] ]] && gres=" Gres=gpu:1"
            echo "NodeName=$node NodeHostname=$node NodeAddr=127.0.0.1 Port=${NODE_PORT[$node]} $topology RealMemory=1000$gres State=UNKNOWN"
        done
        cat <<EOF
PartitionName=multi Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
PartitionName=nobwrap Nodes=n3 MaxTime=INFINITE State=UP
PartitionName=noinstall Nodes=n4 MaxTime=INFINITE State=UP
EOF
    } >"$tmp"
    chmod 0644 "$tmp"
    printf 'NodeName=n[1-2] Name=gpu File=%s\n' "$FAKE_GPU" >"$CONF_DIR/gres.conf"
    chmod 0644 "$CONF_DIR/gres.conf"
    if [[ -f $CONF_DIR/slurm.conf ]] && cmp -s "$tmp" "$CONF_DIR/slurm.conf"; then
        rm -f "$tmp"
        CHANGED=0
    else
        mv -f "$tmp" "$CONF_DIR/slurm.conf"
        say "wrote $CONF_DIR/slurm.conf"
        CHANGED=1
    fi
}

make_dirs() {
    install -d -m 0755 -o slurm -g slurm "$RUN_DIR" "$SPOOL/slurmctld"
    install -d -m 1775 -o root -g slurm "$LOG_DIR"
    local node
    for node in "${NODES[@]}"; do install -d -m 0755 "$SPOOL/slurmd-$node"; done
}

# launch LOG COMMAND...: start a daemon detached (own session, no terminal).
launch() {
    local log=$1
    shift
    setsid "$@" </dev/null >>"$log" 2>&1 9>&- &
    disown $! 2>/dev/null || true
}

start_ctld() {
    pid_from "$(ctld_pidfile)" slurmctld >/dev/null && return 0
    say "starting slurmctld"
    launch "$LOG_DIR/slurmctld.out" "${IN_CLUSTER[@]}" /usr/sbin/slurmctld
    STARTED=1
}

# A node's namespace: this cluster's config at /etc/slurm, its own /tmp and hostname,
# and what the node lacks hidden. Every value is a positional argument.
NODE_SETUP='set -e
node=$1 conf=$2 hide_bwrap=$3 hide_install=$4 prefix=$5
mount --bind "$conf" /etc/slurm
mount -t tmpfs -o mode=1777 tmpfs /tmp
hostname "$node"
if [ "$hide_bwrap" = 1 ]; then mount --bind /dev/null /usr/bin/bwrap; fi
if [ "$hide_install" = 1 ]; then
    mount -t tmpfs -o mode=0755 tmpfs /opt
    case $prefix in /opt|/opt/*) ;; *) [ ! -d "$prefix" ] || mount -t tmpfs -o mode=0755 tmpfs "$prefix" ;; esac
fi
exec /usr/sbin/slurmd -N "$node"'

start_node() {
    local node=$1 hide_bwrap=0 hide_install=0
    pid_from "$(node_pidfile "$node")" slurmd >/dev/null && return 0
    [[ $node == n3 ]] && hide_bwrap=1
    [[ $node == n4 ]] && hide_install=1
    say "starting slurmd $node"
    launch "$LOG_DIR/slurmd-$node.out" unshare --mount --uts --propagation private -- \
        /bin/sh -c "$NODE_SETUP" sh "$node" "$CONF_DIR" "$hide_bwrap" "$hide_install" "$PREFIX"
    STARTED=1
}

ctld_up() { timeout 5 "${IN_CLUSTER[@]}" scontrol ping 2>/dev/null | grep -q 'is UP'; }

# Every slurmd listens on its port and every node is idle (or running jobs). The
# port first: after a restart slurmctld shows the saved states before any slurmd is up.
nodes_ready() {
    local states node
    for node in "${NODES[@]}"; do
        [[ -n $(ss -Hltn "sport = :${NODE_PORT[$node]}") ]] || return 1
    done
    states=$(timeout 5 "${IN_CLUSTER[@]}" sinfo -h -N -o '%N %T' 2>/dev/null | sort -u) || return 1
    [[ $(grep -cE ' (idle|mixed|allocated|completing)$' <<<"$states") == "${#NODES[@]}" ]]
}

wait_until() {  # wait_until SECONDS WHAT LOG COMMAND...
    local limit=$1 what=$2 log=$3
    shift 3
    local deadline=$((SECONDS + limit))
    until "$@"; do
        if ((SECONDS >= deadline)); then
            show_log "$log"
            die "$what within ${limit}s — read $log"
        fi
        sleep 0.2
    done
}

# stop_pid NAME PID: SIGTERM, wait up to 20 s, then SIGKILL (saying so).
stop_pid() {
    local name=$1 pid=$2 deadline=$((SECONDS + 20))
    say "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || return 0
    while alive "$pid" "$name"; do
        if ((SECONDS >= deadline)); then
            say "$name (pid $pid) did not stop within 20s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            return 0
        fi
        sleep 0.1
    done
}

cmd_start() {
    CHANGED=0 STARTED=0
    command -v slurmd >/dev/null || die "Slurm is not installed — run scripts/slurm-cluster.sh start first"
    [[ -S /run/munge/munge.socket.2 ]] || die "munged is not running — run scripts/slurm-cluster.sh start first"
    make_dirs
    [[ -c $FAKE_GPU ]] || mknod -m 0666 "$FAKE_GPU" c 1 3
    write_conf
    if ((CHANGED)); then cmd_stop_daemons; fi
    start_ctld
    wait_until 20 "slurmctld did not answer" "$LOG_DIR/slurmctld.log" ctld_up
    local node
    for node in "${NODES[@]}"; do start_node "$node"; done
    wait_until 30 "not every node became idle" "$LOG_DIR/slurmctld.log" nodes_ready
    say "cluster $CLUSTER up (nodes ${NODES[*]}) in $(elapsed "$T0")s"
}

cmd_stop_daemons() {
    local node pid ctld nodes=() namespaces=() step
    ctld=$(pid_from "$(ctld_pidfile)" slurmctld || true)
    for node in "${NODES[@]}"; do
        if pid=$(pid_from "$(node_pidfile "$node")" slurmd); then
            nodes+=("$pid")
            namespaces+=("$(readlink "/proc/$pid/ns/mnt" || true)")
        fi
    done
    if [[ -n $ctld ]] && ctld_up; then
        local ids
        ids=$(timeout 10 "${IN_CLUSTER[@]}" squeue -h -o %A 2>/dev/null || true)
        if [[ -n $ids ]]; then
            say "cancelling $(wc -w <<<"$ids") job(s)"
            # shellcheck disable=SC2086
            timeout 20 "${IN_CLUSTER[@]}" scancel $ids 2>/dev/null || true
        fi
    fi
    # The steps of our nodes: slurmstepd in the mount namespace of one of our slurmd
    # (the single-node cluster's run in the host's). Give them time to end first.
    local deadline=$((SECONDS + 10)) steps
    while :; do
        steps=()
        for step in $(pgrep -x slurmstepd || true); do
            local ns
            ns=$(readlink "/proc/$step/ns/mnt" 2>/dev/null) || continue
            for pid in "${namespaces[@]}"; do
                if [[ $ns == "$pid" ]]; then steps+=("$step"); fi
            done
        done
        ((${#steps[@]} == 0 || SECONDS >= deadline)) && break
        sleep 0.2
    done
    for step in "${steps[@]}"; do kill -KILL "$step" 2>/dev/null || true; done
    for pid in "${nodes[@]}"; do stop_pid slurmd "$pid"; done
    if [[ -n $ctld ]]; then stop_pid slurmctld "$ctld"; fi
    rm -f "$(ctld_pidfile)"
    for node in "${NODES[@]}"; do rm -f "$(node_pidfile "$node")"; done
}

cmd_status() {
    local ok=0 node
    pid_from "$(ctld_pidfile)" slurmctld >/dev/null || { echo "slurmctld not running"; ok=1; }
    for node in "${NODES[@]}"; do
        pid_from "$(node_pidfile "$node")" slurmd >/dev/null || { echo "slurmd $node not running"; ok=1; }
    done
    if ((ok == 0)); then
        "${IN_CLUSTER[@]}" sinfo -N -o '%N %P %T' || ok=1
        nodes_ready || ok=1
    fi
    return "$ok"
}

lock() {
    exec 9>/run/lock/agent-sandbox-slurm-multinode.lock
    flock -w 300 9 || die "another scripts/slurm-multinode.sh held the lock for 300s"
}

case ${1:-} in
    start) require_root; lock; cmd_start ;;
    stop) require_root; lock; cmd_stop_daemons; rm -f "$FAKE_GPU"; say "stopped in $(elapsed "$T0")s" ;;
    status) require_root; cmd_status ;;
    run) require_root; shift; "${IN_CLUSTER[@]}" "$@" ;;
    *)
        echo "usage: $0 start|stop|status|run CMD..." >&2
        exit 2
        ;;
esac
