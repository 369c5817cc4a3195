#!/usr/bin/env bash
# A Debian root of another release, made with debootstrap and entered with
# pivot_root in a mount namespace of its own — the older (and newer)
# distributions the product claims, run on this machine's kernel (issue 30:
# tests/integration/test_platform_roots.py; docs/platforms.md). Run as root.
#
#   platform-root.sh build SUITE        make (or find) the root; prints its path
#   platform-root.sh wheels SUITE       the wheelhouse for the root's python3 (this
#                                       tree's wheel and its dependencies'); prints its path
#   platform-root.sh run SUITE [--state DIR] [--ro HOST:INSIDE]... -- COMMAND...
#                                       COMMAND as root inside the root
#
# AGENT_SANDBOX_ROOT_EXTRA="PKG ...": a root with these packages too (another
# cache key; every command of one root needs the same value).
#
# SUITE: bullseye (Debian 11: Python 3.9, bubblewrap 0.4.1, firejail 0.9.64,
# util-linux 2.36), trixie (13), sid — any suite debootstrap knows.
#
# The root is cached under $AGENT_SANDBOX_ROOTS (default
# /var/cache/agent-sandbox-roots, root-owned) as SUITE-KEY, KEY a hash of the
# suite, the mirror, the architecture and the package list: a second build is
# instant. A cold build downloads about 60 MB from $AGENT_SANDBOX_MIRROR (default
# http://deb.debian.org/debian, the mirror this machine's apt uses).
#
# `run` never writes the cached root and never touches the host's mounts:
#   - `unshare --mount --propagation private` (/ made rprivate in the new
#     namespace: nothing mounted there propagates back);
#   - the root is the lower layer of an overlay whose upper layer is a tmpfs,
#     or DIR/upper with --state DIR (kept across runs: a user created and a
#     venv installed by one run are there for the next);
#   - its own /proc, /sys (read-only), a /dev tmpfs with the host's null, zero,
#     full, random, urandom and tty bound in and a devpts of its own (new
#     instance, /dev/ptmx its ptmx), /dev/shm, /tmp and /run tmpfs; the host's
#     CA certificates copied to /etc/ssl/certs/ca-certificates.crt;
#   - each --ro HOST:INSIDE bound read-only (the product's tree, the wheelhouse);
#   - then pivot_root into it and the old root detached: user namespaces work
#     inside (they fail in a chroot), the setuid firejail keeps its bit (no
#     nosuid on the overlay).
set -euo pipefail

roots=${AGENT_SANDBOX_ROOTS:-/var/cache/agent-sandbox-roots}
mirror=${AGENT_SANDBOX_MIRROR:-http://deb.debian.org/debian}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# What a smoke run needs at run time: the interpreter with venv, the three
# backends' programs (landlock needs none), libseccomp for pyseccomp, the
# CA bundle; useradd (passwd) and setpriv (util-linux) are in every root.
packages=(python3 python3-venv bubblewrap firejail util-linux libseccomp2 ca-certificates passwd)
# More packages for a root with a purpose, space-separated, part of the
# cache key (a root with them is another root): scripts/slurm-root-cluster.sh
# asks for "slurmctld slurmd slurm-client sackd" (issue 32: Slurm 24.11 on trixie).
extra=${AGENT_SANDBOX_ROOT_EXTRA:-}
read -r -a extra_packages <<< "$extra"
packages+=("${extra_packages[@]}")
# Bump when the way a root is made changes (the key's other part).
format=1

die() { echo "platform-root.sh: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, mounts)"

key() {
    local suite=$1
    printf '%s\n' "$format" "$suite" "$mirror" "$(dpkg --print-architecture)" "${packages[@]}" \
        | sha256sum | cut -c1-12
}

# build SUITE: the cached root's path on stdout (made when missing).
build() {
    local suite=$1 root tmp started
    command -v debootstrap >/dev/null || {
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    }
    [ -e "/usr/share/debootstrap/scripts/$suite" ] || die "debootstrap does not know the suite $suite"
    umask 022
    mkdir -p "$roots"
    chown root:root "$roots"
    chmod 0755 "$roots"
    root="$roots/$suite-$(key "$suite")"
    if [ -e "$root/.complete" ]; then
        echo "$root"
        return
    fi
    # One build of a suite at a time (a second caller waits and finds it made).
    exec 9>"$roots/.lock-$suite"
    flock 9
    if [ ! -e "$root/.complete" ]; then
        started=$SECONDS
        tmp="$root.tmp"
        rm -rf "$tmp"
        echo "platform-root.sh: debootstrap $suite from $mirror (${packages[*]})" >&2
        if ! debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
                "$suite" "$tmp" "$mirror" > "$roots/$suite.log" 2>&1; then
            tail -20 "$roots/$suite.log" >&2
            die "debootstrap $suite failed (log: $roots/$suite.log)"
        fi
        rm -rf "$tmp/var/cache/apt/archives"/*.deb "$tmp/var/lib/apt/lists"/*_Packages
        # The root's own facts, read by the tests without entering it.
        chroot "$tmp" dpkg-query -W -f='${Package} ${Version}\n' \
            python3 bubblewrap firejail util-linux "${extra_packages[@]}" > "$tmp/.versions"
        touch "$tmp/.complete"
        mv "$tmp" "$root"
        echo "platform-root.sh: $suite made in $((SECONDS - started)) s: $root" >&2
    fi
    exec 9>&-
    echo "$root"
}

# python_of ROOT: X.Y of the root's python3 (its symlink's target).
python_of() {
    local target
    target=$(readlink "$1/usr/bin/python3")
    [[ $target =~ ^python(3\.[0-9]+)$ ]] || die "$1/usr/bin/python3 -> $target is not a python3.X"
    echo "${BASH_REMATCH[1]}"
}

# wheels SUITE: a wheelhouse for the root's python3 — this tree's wheel (built
# on the host, every call: the tree changes) and its dependencies' wheels for
# that Python (downloaded once per requirement list and Python, then cached).
wheels() {
    local suite=$1 root version host_python requirements dir deps
    root=$(build "$suite")
    version=$(python_of "$root")
    host_python=${AGENT_SANDBOX_HOST_PYTHON:-$(command -v python3)}
    # pyproject's dependencies whose markers hold on that Python (pip download
    # judges markers by the interpreter running it, not by --python-version).
    requirements=$("$host_python" - "$repo/pyproject.toml" "$version" <<'EOF'
import re, sys
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
text = open(sys.argv[1]).read()
block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M).group(1)
for line in re.findall(r'^\s*"([^"]+)"', block, re.M):
    requirement = Requirement(line)
    if requirement.marker is None or requirement.marker.evaluate(
            {"python_version": sys.argv[2], "python_full_version": sys.argv[2] + ".0"}):
        requirement.marker = None
        print(requirement)
EOF
)
    deps="$roots/wheels-$version-$(printf '%s\n' "$version" "$requirements" | sha256sum | cut -c1-12)"
    if [ ! -e "$deps/.complete" ]; then
        rm -rf "$deps.tmp"
        mkdir -p "$deps.tmp"
        mapfile -t reqs <<< "$requirements"
        # The site's pip configuration (a local index, constraints) is not
        # asked: the wheels of the public index for that Python, binary only.
        env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null \
            "$host_python" -m pip download --quiet --disable-pip-version-check -d "$deps.tmp" \
            --only-binary=:all: --python-version "$version" --implementation cp \
            --abi "cp${version/./}" --platform manylinux2014_x86_64 "${reqs[@]}" pip >&2 \
            || die "pip download of the dependencies for Python $version failed"
        touch "$deps.tmp/.complete"
        rm -rf "$deps"
        mv "$deps.tmp" "$deps"
    fi
    dir="$roots/wheelhouse-$suite"
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$deps"/*.whl "$dir/"
    local tree
    tree=$(mktemp -d)
    # Built from a copy (setuptools writes build/ and *.egg-info beside its sources).
    (cd "$repo" && tar --exclude=./.git --exclude=./tests --exclude=./benchmarks \
        --exclude=./build --exclude='*.egg-info' --exclude=__pycache__ -cf - .) | tar -C "$tree" -xf -
    PIP_CONFIG_FILE=/dev/null "$host_python" -m pip wheel --quiet --disable-pip-version-check \
        --no-deps --no-build-isolation --no-index -w "$dir" "$tree" >&2 \
        || { rm -rf "$tree"; die "building this tree's wheel failed"; }
    rm -rf "$tree"
    chmod -R a+rX "$dir"
    echo "$dir"
}

# run SUITE [--state DIR] [--ro HOST:INSIDE]... -- COMMAND...
run() {
    local suite=$1 root state="" binds=() stage rc=0
    shift
    while [ $# -gt 0 ]; do
        case $1 in
            --state) state=$2; shift 2 ;;
            --ro) binds+=("$2"); shift 2 ;;
            --) shift; break ;;
            *) die "run: unknown option $1" ;;
        esac
    done
    [ $# -gt 0 ] || die "run: no command"
    root=$(build "$suite")
    stage=$(mktemp -d /tmp/platform-root.XXXXXX)
    unshare --mount --propagation private -- "$0" __enter "$root" "$stage" "$state" \
        "${#binds[@]}" "${binds[@]}" "$@" || rc=$?
    rmdir "$stage"
    return "$rc"
}

# __enter ROOT STAGE STATE NBINDS BIND... COMMAND...: inside the new mount namespace.
enter() {
    local root=$1 stage=$2 state=$3 n=$4 new bind host inside node
    shift 4
    local binds=("${@:1:$n}")
    shift "$n"
    mount -t tmpfs -o mode=0700 platform-root "$stage"
    local layers=$stage
    if [ -n "$state" ]; then
        mkdir -p "$state"
        layers=$state
    fi
    mkdir -p "$layers/upper" "$layers/work" "$stage/new"
    new=$stage/new
    mount -t overlay overlay \
        -o "lowerdir=$root,upperdir=$layers/upper,workdir=$layers/work" "$new"
    mount -t proc -o nosuid,nodev,noexec proc "$new/proc"
    mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$new/sys"
    mount -t tmpfs -o mode=0755,nosuid dev "$new/dev"
    for node in null zero full random urandom tty; do
        touch "$new/dev/$node"
        mount --bind "/dev/$node" "$new/dev/$node"
    done
    mkdir "$new/dev/pts" "$new/dev/shm"
    mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts "$new/dev/pts"
    ln -s pts/ptmx "$new/dev/ptmx"
    ln -s /proc/self/fd "$new/dev/fd"
    ln -s /proc/self/fd/0 "$new/dev/stdin"
    ln -s /proc/self/fd/1 "$new/dev/stdout"
    ln -s /proc/self/fd/2 "$new/dev/stderr"
    mount -t tmpfs -o mode=1777,nosuid,nodev shm "$new/dev/shm"
    mount -t tmpfs -o mode=1777,nosuid,nodev tmp "$new/tmp"
    mount -t tmpfs -o mode=0755,nosuid,nodev run "$new/run"
    mkdir -p "$new/run/lock" "$new/etc/ssl/certs"
    cp /etc/ssl/certs/ca-certificates.crt "$new/etc/ssl/certs/ca-certificates.crt"
    for bind in "${binds[@]}"; do
        host=${bind%%:*}
        inside=${bind#*:}
        [ -e "$host" ] || die "--ro $bind: $host does not exist"
        if [ -d "$host" ]; then
            mkdir -p "$new$inside"
        else
            mkdir -p "$(dirname "$new$inside")"
            touch "$new$inside"
        fi
        mount --bind "$host" "$new$inside"
        mount -o remount,bind,ro "$new$inside"
    done
    cd "$new"
    mkdir -p .oldroot
    pivot_root . .oldroot
    cd /
    umount -l /.oldroot
    rmdir /.oldroot
    export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    exec "$@"
}

command=${1:-}
[ $# -ge 1 ] && shift
case $command in
    build) [ $# -eq 1 ] || die "usage: build SUITE"; build "$1" ;;
    wheels) [ $# -eq 1 ] || die "usage: wheels SUITE"; wheels "$1" ;;
    run) [ $# -ge 1 ] || die "usage: run SUITE [--state DIR] [--ro HOST:INSIDE]... -- COMMAND..."
         run "$@" ;;
    __enter) enter "$@" ;;
    *) die "usage: platform-root.sh build|wheels|run SUITE ..." ;;
esac
