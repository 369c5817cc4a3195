#!/usr/bin/env bash
# A real single-node Slurm cluster (Debian 12's Slurm 22.05) on this machine, for
# the chaperon's tests and for trying agent-sandbox out. Run as root.
#
#   scripts/slurm-cluster.sh start    install what is missing, write the config, start
#                                     munged, MariaDB, slurmdbd, slurmctld, slurmd (only
#                                     those not running), set up accounting, and prove
#                                     a job runs and shows in sacct. Idempotent: quick
#                                     when everything is up already.
#   scripts/slurm-cluster.sh stop     cancel every job, stop the daemons of its pid files
#                                     and that slurmd's steps, nothing else
#   scripts/slurm-cluster.sh status   print what runs; exit 0 only when all is up
#   scripts/slurm-cluster.sh check    submit a job as the test user, wait for it in sacct
#
# There is no systemd here: each daemon is started directly, detached, with its
# output in /var/log/slurm/<daemon>.log. Every wait is bounded and names the log to
# read when it runs out.
set -euo pipefail

CLUSTER=${SLURM_CLUSTER_NAME:-agentsandbox}
ACCOUNT=research
TEST_USERS=(astest asother ${AGENT_SANDBOX_TEST_EXTRA_USERS:-})
PARTITIONS=(debug other)
PACKAGES=(slurm-wlm slurmctld slurmd slurm-client slurmdbd munge mariadb-server)

CONF_DIR=/etc/slurm
SLURM_CONF=$CONF_DIR/slurm.conf
DBD_CONF=$CONF_DIR/slurmdbd.conf
LOG_DIR=/var/log/slurm
RUN_DIR=/run/slurm
MUNGE_KEY=/etc/munge/munge.key
MUNGE_PID=/run/munge/munged.pid
MYSQL_SOCK=/run/mysqld/mysqld.sock
MYSQL_PID=/run/mysqld/mysqld.pid
MYSQL_DATA=/var/lib/mysql
DB_NAME=slurm_acct_db
DB_USER=slurm

T0=$(date +%s.%N)

say() { printf 'slurm-cluster: %s\n' "$*" >&2; }

# shellcheck source=slurm-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm-lib.sh"

# wait_for SECONDS WHAT LOG COMMAND...: run COMMAND until it succeeds.
wait_for() {
    local limit=$1 what=$2 log=$3
    shift 3
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            show_log "$log"
            die "$what did not come up within ${limit}s — read $log"
        fi
        sleep 0.2
    done
}


# --- processes -------------------------------------------------------------------


# pid_of NAME PIDFILE: the pid of the running daemon NAME, from its pid file, else the
# oldest live process of that exact name in this mount namespace (a daemon started
# without its pid file); fails when none runs. The daemons of
# scripts/slurm-multinode.sh live in mount namespaces of their own, so they are
# never taken for this cluster's.
pid_of() {
    local name=$1 pidfile=$2 pid
    if pid=$(pid_from "$pidfile" "$name"); then
        echo "$pid"
        return 0
    fi
    pid=$(live_pids "$name" | head -n 1)
    [[ -n $pid ]] && echo "$pid"
}

# live_pids NAME: the live processes named exactly NAME in this mount namespace,
# oldest first.
live_pids() {
    local pid ours
    ours=$(readlink /proc/self/ns/mnt)
    for pid in $(pgrep -x "$1" | sort -n); do
        if alive "$pid" "$1" && [[ $(readlink "/proc/$pid/ns/mnt" 2>/dev/null) == "$ours" ]]; then
            echo "$pid"
        fi
    done
}

running() { pid_of "$1" "$2" >/dev/null 2>&1; }

# stop_daemon NAME PIDFILE SECONDS: SIGTERM the daemon of its pid file (only it: other
# processes of that name belong to someone else), wait, then SIGKILL it (saying so).
stop_daemon() {
    local name=$1 pidfile=$2 limit=$3 pid deadline
    if ! pid=$(pid_from "$pidfile" "$name"); then
        rm -f "$pidfile"
        return 0
    fi
    say "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + limit))
    while alive "$pid" "$name"; do
        if ((SECONDS >= deadline)); then
            say "$name did not stop within ${limit}s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.5
            break
        fi
        sleep 0.2
    done
    rm -f "$pidfile"
}

# steps_of PID: the slurmstepd started by the slurmd PID — the ones in its mount
# namespace (the multi-node cluster's steps live in their node's own namespace).
steps_of() {
    local ns step
    ns=$(readlink "/proc/$1/ns/mnt" 2>/dev/null) || return 0
    for step in $(pgrep -x slurmstepd || true); do
        if alive "$step" slurmstepd && [[ $(readlink "/proc/$step/ns/mnt" 2>/dev/null) == "$ns" ]]; then
            echo "$step"
        fi
    done
}

# launch LOG COMMAND...: start a daemon detached (own session, no terminal, output to LOG).
launch() {
    local log=$1
    shift
    setsid "$@" </dev/null >>"$log" 2>&1 9>&- &
    disown $! 2>/dev/null || true
}

# --- installation ----------------------------------------------------------------

installed() { [[ $(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) == installed ]]; }

install_packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do installed "$p" || missing+=("$p"); done
    ((${#missing[@]})) || return 0
    local t
    t=$(date +%s.%N)
    say "installing ${missing[*]}"
    local apt=(apt-get -o DPkg::Lock::Timeout=300 -y -q --no-install-recommends)
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
        apt-get -o DPkg::Lock::Timeout=300 -q update >&2
    fi
    if ! "${apt[@]}" install "${missing[@]}" >&2; then
        say "apt-get install failed; updating the package lists and trying again"
        apt-get -o DPkg::Lock::Timeout=300 -q update >&2
        "${apt[@]}" install "${missing[@]}" >&2 || die "apt-get install ${missing[*]} failed"
    fi
    say "packages installed in $(elapsed "$t")s"
}

ensure_users() {
    local u
    for u in "${TEST_USERS[@]}"; do
        id -u "$u" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$u"
    done
}

# --- configuration ---------------------------------------------------------------

# install_file PATH MODE OWNER: replace PATH with stdin when the content, mode or
# owner differs; sets CHANGED=1 when it did, else CHANGED=0, and PREVIOUS to the
# content it had before.
install_file() {
    local path=$1 mode=$2 owner=$3 tmp
    PREVIOUS=$(cat "$path" 2>/dev/null || true)
    tmp=$(mktemp "$path.XXXXXX")
    cat >"$tmp"
    chmod "$mode" "$tmp"
    chown "$owner" "$tmp"
    if [[ -f $path ]] && cmp -s "$tmp" "$path" \
        && [[ $(stat -c '%a %U:%G' "$path") == "$(stat -c '%a %U:%G' "$tmp")" ]]; then
        rm -f "$tmp"
        CHANGED=0
    else
        mv -f "$tmp" "$path"
        say "wrote $path"
        CHANGED=1
    fi
}

node_line() {
    local line
    line=$(slurmd -C 2>/dev/null | sed -n 's/ *UpTime=.*//; /^NodeName=/p') || true
    [[ -n $line ]] || die "slurmd -C printed no NodeName line"
    echo "$line"
}

node_name() {  # node_name [NODE_LINE]
    local line
    line=${1:-$(node_line)}
    line=${line%% *}
    echo "${line#NodeName=}"
}

write_slurm_conf() {  # write_slurm_conf NODE_LINE
    local host node_line=$1 node
    host=$(hostname -s)
    node=$(node_name "$node_line")
    install_file "$SLURM_CONF" 0644 root:root <<EOF
# Written by agent-sandbox scripts/slurm-cluster.sh — a single-node test cluster.
# Edits are overwritten by the next "start".
ClusterName=$CLUSTER
SlurmctldHost=$host
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
MailProg=/bin/true
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info

# Short timeouts so tests are fast.
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=5
KillWait=5
InactiveLimit=0
Waittime=0
MinJobAge=300

# Scheduling.
SchedulerType=sched/backfill
PriorityType=priority/multifactor
PriorityWeightAge=100
PriorityWeightFairshare=1000
SchedulerParameters=bf_interval=5,sched_min_interval=100000
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=512
MaxJobCount=50000
MaxArraySize=10001

# Accounting through slurmdbd on MariaDB: real sacct. Job environments and
# scripts are stored, as many sites do, so that the tests can prove the
# sandbox shows them only for jobs in its scope (sacct --env-vars, -B).
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoreFlags=job_comment,job_env,job_script
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none

$node_line State=UNKNOWN
PartitionName=${PARTITIONS[0]} Nodes=$node Default=YES MaxTime=INFINITE State=UP
PartitionName=${PARTITIONS[1]} Nodes=$node MaxTime=60 State=UP
EOF
}

db_password() {
    local pass=""
    [[ -r $DBD_CONF ]] && pass=$(sed -n 's/^StoragePass=//p' "$DBD_CONF" | head -n 1)
    if [[ -z $pass ]]; then
        pass=$(head -c 64 /dev/urandom | base64 | tr -dc A-Za-z0-9 | head -c 24)
    fi
    echo "$pass"
}

write_dbd_conf() {
    local pass=$1
    install_file "$DBD_CONF" 0600 slurm:slurm <<EOF
# Written by agent-sandbox scripts/slurm-cluster.sh. Edits are overwritten by "start".
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=slurm
DebugLevel=info
LogFile=$LOG_DIR/slurmdbd.log
PidFile=$RUN_DIR/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=$DB_NAME
StorageUser=$DB_USER
StoragePass=$pass
EOF
}

make_dirs() {
    install -d -m 0755 -o root -g root "$CONF_DIR"
    # munged refuses a log in a directory owned by another user than root or munge,
    # or group-writable without the sticky bit; the Slurm daemons want to write
    # there (for core files). Each daemon gets its own pre-created file.
    install -d -m 1775 -o root -g slurm "$LOG_DIR"
    install -d -m 0755 -o slurm -g slurm "$RUN_DIR" /var/spool/slurmctld
    install -d -m 0755 -o root -g root /var/spool/slurmd
    install -d -m 0700 -o munge -g munge /etc/munge /var/log/munge
    install -d -m 0711 -o munge -g munge /var/lib/munge
    install -d -m 0755 -o munge -g munge /run/munge
    install -d -m 0755 -o mysql -g mysql /run/mysqld
    local f
    for f in slurmctld slurmd slurmdbd; do
        [[ -e $LOG_DIR/$f.log ]] || install -m 0640 -o slurm -g slurm /dev/null "$LOG_DIR/$f.log"
    done
    [[ -e $LOG_DIR/munged.log ]] || install -m 0640 -o munge -g munge /dev/null "$LOG_DIR/munged.log"
    [[ -e $LOG_DIR/mariadb.log ]] || install -m 0640 -o mysql -g mysql /dev/null "$LOG_DIR/mariadb.log"
}

# --- daemons ---------------------------------------------------------------------

munge_works() { munge -n </dev/null | unmunge >/dev/null; }

start_munge() {
    if [[ ! -s $MUNGE_KEY ]]; then
        say "creating $MUNGE_KEY"
        mungekey --create --keyfile="$MUNGE_KEY" --force
    fi
    chown munge:munge "$MUNGE_KEY"
    chmod 0400 "$MUNGE_KEY"
    running munged "$MUNGE_PID" && return 0
    say "starting munged"
    rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
    launch "$LOG_DIR/munged.log" runuser -u munge -- /usr/sbin/munged \
        --log-file="$LOG_DIR/munged.log" --pid-file="$MUNGE_PID"
    STARTED=1
    wait_for 20 munged "$LOG_DIR/munged.log" munge_works
}

mysql_works() { mariadb --protocol=socket -S "$MYSQL_SOCK" -u root -N -e 'SELECT 1'; }

start_mariadb() {
    if [[ ! -d $MYSQL_DATA/mysql ]]; then
        say "initialising MariaDB in $MYSQL_DATA"
        mariadb-install-db --user=mysql --datadir="$MYSQL_DATA" \
            --auth-root-authentication-method=socket >>"$LOG_DIR/mariadb.log" 2>&1 \
            || { show_log "$LOG_DIR/mariadb.log"; die "mariadb-install-db failed — read $LOG_DIR/mariadb.log"; }
    fi
    if ! running mariadbd "$MYSQL_PID"; then
        say "starting MariaDB"
        launch "$LOG_DIR/mariadb.log" /usr/sbin/mariadbd --user=mysql \
            --datadir="$MYSQL_DATA" --socket="$MYSQL_SOCK" --pid-file="$MYSQL_PID" \
            --log-error="$LOG_DIR/mariadb.log" --bind-address=127.0.0.1 \
            --innodb-use-native-aio=0 --innodb-flush-log-at-trx-commit=2 \
            --innodb-lock-wait-timeout=900 --innodb-log-file-size=64M \
            --innodb-buffer-pool-size=1G
        STARTED=1
    fi
    wait_for 60 MariaDB "$LOG_DIR/mariadb.log" mysql_works
}

setup_database() {
    local pass=$1
    mariadb --protocol=socket -S "$MYSQL_SOCK" -u root <<EOF
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$pass';
ALTER USER '$DB_USER'@'localhost' IDENTIFIED BY '$pass';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';
EOF
}

dbd_works() { timeout 10 sacctmgr -n -P list cluster format=Cluster; }

start_slurmdbd() {
    if ! running slurmdbd "$RUN_DIR/slurmdbd.pid"; then
        say "starting slurmdbd"
        launch "$LOG_DIR/slurmdbd.log" /usr/sbin/slurmdbd
        STARTED=1
    fi
    wait_for 60 slurmdbd "$LOG_DIR/slurmdbd.log" dbd_works
}

sacctmgr_has() {  # sacctmgr_has ARGS...: the listing is not empty
    [[ -n $(timeout 10 sacctmgr -n -P "$@") ]]
}

setup_accounting() {
    local u
    sacctmgr_has list cluster "$CLUSTER" format=Cluster \
        || sacctmgr -i add cluster "$CLUSTER" >&2
    sacctmgr_has list account "$ACCOUNT" format=Account \
        || sacctmgr -i add account "$ACCOUNT" Cluster="$CLUSTER" \
            Description="agent-sandbox tests" Organization=agent-sandbox >&2
    for u in root "${TEST_USERS[@]}"; do
        sacctmgr_has list assoc cluster="$CLUSTER" account="$ACCOUNT" user="$u" format=User \
            || sacctmgr -i add user "$u" Account="$ACCOUNT" DefaultAccount="$ACCOUNT" \
                Cluster="$CLUSTER" >&2
    done
}

ctld_works() { timeout 10 scontrol ping | grep -q 'is UP'; }

start_slurmctld() {
    if ! running slurmctld "$RUN_DIR/slurmctld.pid"; then
        say "starting slurmctld"
        launch "$LOG_DIR/slurmctld.log" /usr/sbin/slurmctld
        STARTED=1
    fi
    wait_for 60 slurmctld "$LOG_DIR/slurmctld.log" ctld_works
}

node_state() { timeout 10 sinfo -h -N -n "$1" -o %T 2>/dev/null | head -n 1; }

node_ready() { [[ $(node_state "$1") =~ ^(idle|mixed|allocated|completing)$ ]]; }

start_slurmd() {
    local node=$1 deadline state resumed=0
    if ! running slurmd "$RUN_DIR/slurmd.pid"; then
        say "starting slurmd"
        launch "$LOG_DIR/slurmd.log" /usr/sbin/slurmd
        STARTED=1
    fi
    deadline=$((SECONDS + 60))
    until node_ready "$node"; do
        state=$(node_state "$node" 2>/dev/null || true)
        if [[ $state =~ ^(down|drain|drained|draining|fail|failing)$ ]] && ((!resumed)); then
            say "node $node is $state; resuming it"
            scontrol update nodename="$node" state=resume >&2 || true
            resumed=1
        fi
        if ((SECONDS >= deadline)); then
            show_log "$LOG_DIR/slurmd.log"
            show_log "$LOG_DIR/slurmctld.log"
            die "node $node did not become idle within 60s (state '${state}') — read $LOG_DIR/slurmd.log and $LOG_DIR/slurmctld.log"
        fi
        sleep 0.2
    done
}

# The proof: a job submitted by the test user completes and shows in sacct.
check_job() {
    local user=${TEST_USERS[0]} home id state deadline t
    t=$(date +%s.%N)
    home=$(getent passwd "$user" | cut -d: -f6)
    id=$(cd / && runuser -u "$user" -- env HOME="$home" USER="$user" LOGNAME="$user" \
        sbatch --parsable --chdir=/tmp --output=/dev/null --job-name=slurm-cluster-check \
        --wrap true) || die "sbatch as $user failed — read $LOG_DIR/slurmctld.log"
    id=${id%%;*}
    [[ $id =~ ^[0-9]+$ ]] || die "sbatch printed '$id', not a job id"
    deadline=$((SECONDS + 60))
    while :; do
        state=$(timeout 10 sacct -n -X -P -j "$id" -o State 2>/dev/null | head -n 1 || true)
        case $state in
            COMPLETED) break ;;
            FAILED* | CANCELLED* | TIMEOUT* | NODE_FAIL* | OUT_OF_MEMORY* | BOOT_FAIL* | DEADLINE*)
                show_log "$LOG_DIR/slurmd.log"
                die "check job $id ended $state — read $LOG_DIR/slurmd.log" ;;
        esac
        if ((SECONDS >= deadline)); then
            show_log "$LOG_DIR/slurmctld.log"
            die "check job $id was not COMPLETED in sacct within 60s (sacct: '${state}', squeue: '$(squeue -h -j "$id" -o '%T %r' 2>/dev/null || true)') — read $LOG_DIR/slurmctld.log, $LOG_DIR/slurmd.log, $LOG_DIR/slurmdbd.log"
        fi
        sleep 0.2
    done
    say "check job $id of $user COMPLETED and in sacct after $(elapsed "$t")s"
}

# Lines of slurm.conf that `scontrol reconfigure` applies to running daemons
# (and comments); a change to any other line restarts them.
RECONFIGURABLE='^(AccountingStoreFlags=|#)'

# only_reconfigurable_changed OLD_CONTENT NEW_FILE: do the two differ only in
# RECONFIGURABLE lines (and is there an old content at all)?
only_reconfigurable_changed() {
    [[ -n $1 ]] || return 1
    diff -q <(grep -Ev "$RECONFIGURABLE" <<<"$1") <(grep -Ev "$RECONFIGURABLE" "$2") >/dev/null
}

# --- subcommands -----------------------------------------------------------------

cmd_start() {
    require_root
    STARTED=0
    install_packages
    ensure_users
    make_dirs
    local pass line node
    line=$(node_line)
    node=$(node_name "$line")
    pass=$(db_password)
    write_slurm_conf "$line"
    local reconfigure=0
    if ((CHANGED)) && only_reconfigurable_changed "$PREVIOUS" "$SLURM_CONF" \
        && running slurmctld "$RUN_DIR/slurmctld.pid"; then
        reconfigure=1   # the daemons keep running: `scontrol reconfigure` below
    elif ((CHANGED)); then
        # A changed config (first start, or changed hardware/script): restart what read it.
        stop_daemon slurmd "$RUN_DIR/slurmd.pid" 20
        stop_daemon slurmctld "$RUN_DIR/slurmctld.pid" 20
    fi
    write_dbd_conf "$pass"
    if ((CHANGED)); then
        stop_daemon slurmdbd "$RUN_DIR/slurmdbd.pid" 20
    fi
    start_munge
    start_mariadb
    setup_database "$pass"
    start_slurmdbd
    setup_accounting
    start_slurmctld
    start_slurmd "$node"
    if ((reconfigure)); then
        say "slurm.conf changed only in reconfigurable lines: scontrol reconfigure"
        scontrol reconfigure || die "scontrol reconfigure failed — read $LOG_DIR/slurmctld.log"
    fi
    if ((STARTED)); then
        check_job
    fi
    say "cluster $CLUSTER up (node $node, partitions ${PARTITIONS[*]}) in $(elapsed "$T0")s"
}

cmd_stop() {
    require_root
    local ids deadline
    if command -v scontrol >/dev/null && running slurmctld "$RUN_DIR/slurmctld.pid" \
        && ctld_works 2>/dev/null; then
        ids=$(timeout 10 squeue -h -o %A 2>/dev/null || true)
        if [[ -n $ids ]]; then
            say "cancelling $(wc -w <<<"$ids") job(s)"
            # shellcheck disable=SC2086
            timeout 30 scancel $ids 2>/dev/null || true
        fi
    fi
    # Let the steps of cancelled jobs finish before slurmd goes; kill what is left of
    # this slurmd's steps (never another cluster's).
    local slurmd steps=()
    if slurmd=$(pid_from "$RUN_DIR/slurmd.pid" slurmd); then
        deadline=$((SECONDS + 15))
        while [[ -n $(steps_of "$slurmd") ]] && ((SECONDS < deadline)); do sleep 0.2; done
        mapfile -t steps < <(steps_of "$slurmd")
    fi
    stop_daemon slurmd "$RUN_DIR/slurmd.pid" 20
    if ((${#steps[@]})); then
        say "killing the steps left behind (pid ${steps[*]})"
        kill -KILL "${steps[@]}" 2>/dev/null || true
    fi
    stop_daemon slurmctld "$RUN_DIR/slurmctld.pid" 20
    stop_daemon slurmdbd "$RUN_DIR/slurmdbd.pid" 20
    stop_daemon mariadbd "$MYSQL_PID" 60
    stop_daemon munged "$MUNGE_PID" 10
    say "stopped in $(elapsed "$T0")s"
}

cmd_status() {
    local ok=0 name pidfile pid
    while read -r name pidfile; do
        if pid=$(pid_of "$name" "$pidfile" 2>/dev/null); then
            printf '%-10s running (pid %s)\n' "$name" "$pid"
        else
            printf '%-10s not running\n' "$name"
            ok=1
        fi
    done <<EOF
munged $MUNGE_PID
mariadbd $MYSQL_PID
slurmdbd $RUN_DIR/slurmdbd.pid
slurmctld $RUN_DIR/slurmctld.pid
slurmd $RUN_DIR/slurmd.pid
EOF
    if ((ok == 0)); then
        local node state
        node=$(node_name)
        munge_works 2>/dev/null || { echo "munge does not answer"; ok=1; }
        mysql_works >/dev/null 2>&1 || { echo "MariaDB does not answer"; ok=1; }
        dbd_works >/dev/null 2>&1 || { echo "slurmdbd does not answer"; ok=1; }
        ctld_works 2>/dev/null || { echo "slurmctld does not answer"; ok=1; }
        state=$(node_state "$node" 2>/dev/null || true)
        printf 'node %s: %s\n' "$node" "${state:-unknown}"
        node_ready "$node" || ok=1
    fi
    if ((ok == 0)); then echo "cluster $CLUSTER is up"; else echo "cluster $CLUSTER is not (fully) up"; fi
    return "$ok"
}

# One start/stop at a time (two test sessions may start the cluster together). The
# daemons do not inherit the lock (launch closes fd 9).
lock() {
    exec 9>/run/lock/agent-sandbox-slurm-cluster.lock
    flock -w 900 9 || die "another scripts/slurm-cluster.sh held the lock for 900s"
}

case ${1:-} in
    start) require_root; lock; cmd_start ;;
    stop) require_root; lock; cmd_stop ;;
    status) cmd_status ;;
    check) require_root; check_job ;;
    *)
        echo "usage: $0 start|stop|status|check" >&2
        exit 2
        ;;
esac
