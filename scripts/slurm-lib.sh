# Shared by scripts/slurm-cluster.sh and scripts/slurm-multinode.sh (sourced,
# never run): messages, timing, and telling our own daemons from anyone
# else's by their pid files. The sourcing script defines say() first, with
# its own prefix.

die() {
    say "ERROR: $*"
    exit 1
}

elapsed() {  # seconds since $1 (a date +%s.%N), one decimal
    awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'
}

show_log() {  # the last lines of a log, to make a failure explain itself
    if [[ -s $1 ]]; then
        say "last lines of $1:"
        tail -n 25 "$1" | sed 's/^/    /' >&2
    fi
}

require_root() {
    [[ $(id -u) == 0 ]] || die "must run as root (it installs packages and starts daemons)"
}

# alive PID NAME: PID is a live (not zombie) process named exactly NAME.
alive() {
    local stat
    [[ $1 =~ ^[0-9]+$ ]] && stat=$(cat /proc/"$1"/stat 2>/dev/null) || return 1
    # /proc/PID/stat: "PID (COMM) STATE ..."; COMM may hold spaces or parentheses.
    [[ $stat == "$1 ($2) "* && ${stat##*) } != [ZX]* ]]
}

# pid_from PIDFILE NAME: the pid in PIDFILE when that process is alive and named
# NAME. Only pid files: a daemon of the same name this script did not start is
# never taken for ours.
pid_from() {
    local pid
    [[ -r $1 ]] || return 1
    pid=$(tr -dc 0-9 <"$1")
    alive "$pid" "$2" && echo "$pid"
}
