"""The plan-equivalence corpus: what the installed launcher's `--dry-run`
prints for a matrix of launches, compiled and from the plan cache.

Recorded on the commit before issue 28's redesign (9a35cf6) and kept as a
fixture (plan_corpus.json), so the redesign is proven to give the same plans
end to end — the real launcher, run as an unprivileged user, each backend on
the real kernel — as the carve corpus (tests/unit/backends/carve_corpus.py)
proved the backend protocol at the level of one backend's plan. Re-record
only for an intended change, as root, against an install of the code to
record (the same variables as the tests):

    AGENT_SANDBOX_TEST_PREFIX=… python -m tests.integration.plan_corpus --write

How it works. A user of its own (PLANS_USER: the plans name the home and
list what is in it, and the suite's test user's home changes with every
test before this one) gets a home rebuilt to the same content on every run,
one project, and an agent stand-in on PATH. Each case of the matrix
(MATRIX) is, in order, in the same home:
  1. real launches until the plan cache holds the case's plan (the first
     launch of a backend probes it and stores nothing; a profile's first
     launch makes its state entries, too new to be stored);
  2. a dry run: from the cache (its "plan:" line, part of the record, says
     so; a case whose launches store nothing records "compiled now");
  3. a dry run with the stored plans removed, which must be compiled now;
  4. the two reports, normalised (normalise(): the home, the user, the
     install prefix, session ids, nonces and digests), are the case's
     record.
A launch that is refused (exit 125) records its exit and message instead.
The cases run in a fixed order on a home that the earlier cases' launches
have changed (agent state, the per-project package cache): the order is
part of the record.

The corpus stores each report as a list of section ids, each section (a
line that does not start with a space and the indented lines under it)
stored once by the digest of its lines: most sections (hidden paths,
seccomp, the environment of one network mode) are shared across cases.

The matrix. The full product (3 backends × 4 home modes × 3 network modes ×
3 launch kinds × the chaperon on and off, each cached and compiled) is 216
launches of four or five launcher runs each: many minutes. MATRIX is a
pairwise design instead: every backend × every home mode (12 cases), with
the network mode (b + h) mod 3, the launch kind (b + 2h) mod 3 and the
chaperon (b + h) mod 2 of the backend's and the home mode's index b and h:
every pair of values of any two dimensions occurs (the test checks it), and
every case is both cached and compiled. The launch kinds: `run -- true`,
the claude profile (`claude --version`, a stand-in in ~/tools/bin first on
PATH), `run --job -- true` (JOB_NETWORK_MODE). One case more (CASES): the
profile in a writable home with the stand-in outside it. With the chaperon on (CHAPERON=true; Slurm is
installed on the test hosts) the cached plan has the chaperon the storing
launch started and a dry run's compile has none (a dry run starts nothing);
so for a profile, with the session copy of the agent's configuration:
both reports are recorded, and for `run` and a job without the chaperon
they must be equal.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

FIXTURE = Path(__file__).with_name("plan_corpus.json")
BACKENDS = ("bwrap", "firejail", "landlock")
HOME_MODES = ("tmpwrite", "restricted", "read", "write")
NETWORK_MODES = ("open", "allowlist", "isolated")
KINDS = ("run", "profile", "job")
CHAPERON = ("chaperon", "no-chaperon")
DIMENSIONS = (BACKENDS, HOME_MODES, NETWORK_MODES, KINDS, CHAPERON)
MATRIX = tuple(
    (backend, home, NETWORK_MODES[(b + h) % 3], KINDS[(b + 2 * h) % 3], CHAPERON[(b + h) % 2])
    for b, backend in enumerate(BACKENDS) for h, home in enumerate(HOME_MODES))
# Beside the design: the profile in a HOME_ACCESS=write home, which refuses a
# stand-in in the home (the matrix's case firejail/write/allowlist/profile/
# chaperon records that refusal), with the stand-in installed outside it,
# root-owned ("profile-outside": OUTSIDE_BIN first on PATH).
CASES = MATRIX + (("firejail", "write", "allowlist", "profile-outside", "chaperon"),)

PLAN_LINE = "plan:      "
HIT = PLAN_LINE + "from the compiled plan cache"
MISS = PLAN_LINE + "compiled now"
PROJECT = "proj/corpus"
STANDIN = "#!/bin/sh\necho \"1.0.0 (Claude Code stand-in)\"\n"
# The home every run starts from (beside the stand-in and the project): the
# suite's test user's secrets and dotfiles (tests/conftest.py's user fixture).
HOME_FILES = {
    ".ssh/id_rsa": ("PRIVATE KEY", 0o600),
    ".ssh/config": ("Host *", 0o600),
    ".aws/credentials": ("[default]\naws_secret_access_key=x\n", 0o600),
    ".gnupg/secring.gpg": ("gpg", 0o600),
    ".netrc": ("machine example.org password hunter2\n", 0o600),
    ".config/gh/hosts.yml": ("oauth_token: gho_x\n", 0o600),
    ".docker/config.json": ("{}", 0o600),
    ".kube/config": ("apiVersion: v1", 0o600),
    ".bashrc": ("# test user's bashrc\n", 0o644),
    ".profile": ("# test user's profile\n", 0o644),
    ".gitconfig": ("[user]\n\tname = Test User\n", 0o644),
    ".config/other/settings.txt": ("visible when .config is granted\n", 0o644),
    ".claude/settings.json": ('{"model": "base"}\n', 0o600),
    "tools/bin/claude": (STANDIN, 0o755),
}
# (the plan cache trusts no file changed less than 0.1 s before a compile)
SETTLED_S = 0.12


def plans_user() -> str:
    return os.environ.get("AGENT_SANDBOX_TEST_PLANS_USER",
                          os.environ.get("AGENT_SANDBOX_TEST_USER", "astest") + "-plans")


def installed() -> str:
    prefix = os.environ.get("AGENT_SANDBOX_TEST_PREFIX", "/opt/agent-sandbox")
    return f"{prefix}/venv/bin/agent-sandbox"


class Home:
    """The corpus's own user, with a home rebuilt to the same content (as root)."""

    def __init__(self, name: str):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name],
                           check=True)
            entry = pwd.getpwnam(name)
        self.name, self.uid, self.gid = entry.pw_name, entry.pw_uid, entry.pw_gid
        self.home = Path(entry.pw_dir)
        self.project = self.home / PROJECT

    def rebuild(self) -> None:
        self.home.mkdir(mode=0o755, exist_ok=True)
        for entry in self.home.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        os.chown(self.home, self.uid, self.gid)
        self.home.chmod(0o755)
        old = os.umask(0o022)
        try:
            for relative, (content, mode) in HOME_FILES.items():
                self.write(relative, content, mode)
            self.project.mkdir(parents=True)
            for path in (self.project, self.project.parent):
                os.chown(path, self.uid, self.gid)
            (self.home / ".ssh").chmod(0o700)
            self.outside_bin.mkdir(parents=True, exist_ok=True)
            (self.outside_bin / "claude").write_text(STANDIN)
            (self.outside_bin / "claude").chmod(0o755)
        finally:
            os.umask(old)

    def write(self, relative: str, content: str, mode: int) -> None:
        path = self.home / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        path.chmod(mode)
        for parent in [path, *path.parents]:
            if parent == self.home:
                break
            os.chown(parent, self.uid, self.gid)

    @property
    def outside_bin(self) -> Path:
        """The stand-in's root-owned directory outside the home."""
        return Path(f"/opt/{self.name}-agents/bin")

    def env(self, kind: str, **extra: str) -> dict:
        first = self.outside_bin if kind == "profile-outside" else self.home / "tools/bin"
        return {"PATH": f"{first}:/usr/local/bin:/usr/bin:/bin",
                "HOME": str(self.home), "USER": self.name, "LOGNAME": self.name,
                "LANG": "C.UTF-8", "SANDBOX_QUIET": "1", **extra}

    def run(self, argv, env) -> subprocess.CompletedProcess:
        return subprocess.run(argv, user=self.uid, group=self.gid, extra_groups=[], env=env,
                              cwd=str(self.project), capture_output=True, text=True,
                              timeout=60)


def argv_for(program: str, kind: str, dry_run: bool) -> list:
    dry = ["--dry-run"] if dry_run else []
    if kind.startswith("profile"):
        return [program, *dry, "claude", "--version"]
    return [program, "run", *dry, *(["--job"] if kind == "job" else []), "--", "true"]


def normalise(text: str, home: Home, program: str) -> str:
    prefix = os.path.dirname(os.path.dirname(os.path.dirname(program)))
    text = text.replace(prefix, "<PREFIX>").replace(str(home.home), "<HOME>")
    text = re.sub(rf"\b{re.escape(home.name)}\b", "<USER>", text)
    # (landlock's per-session TMPDIR: /tmp/agent-sandbox.tmp-UID-SESSION)
    text = re.sub(rf"(?<=[-/.]){home.uid}(?=[-/.])", "<UID>", text)
    # Digests of a path (the per-project package cache), then session ids.
    text = re.sub(r"(?<![0-9a-f])[0-9a-f]{16}(?![0-9a-f])", "<digest>", text)
    text = re.sub(r"(?<![0-9a-f])[0-9a-f]{12}(?![0-9a-f])", "<id>", text)
    # (landlock's relay: a free port of the host's loopback, chosen per launch)
    text = re.sub(r"(?<=127\.0\.0\.1:)\d+|(?<=--relay )\d+", "<port>", text)
    # (landlock grants /etc entry by entry around Slurm's configuration
    # directories, issue 32: the host's /etc entries come and go — one line,
    # and the rule count, which follows them)
    text = re.sub(r"(?m)(?:^  ro +/etc/[^/\n]+\n)+",
                  "  ro         /etc/<each entry but Slurm's>\n", text)
    text = re.sub(r"Landlock rules \(\d+\):", "Landlock rules (<n>):", text)
    # (the chaperon's session directory: the id and a nonce)
    return re.sub(r"<id>-[0-9a-f]{8}(?![0-9a-f])", "<id>-<nonce>", text)


def dry_run(home: Home, program: str, kind: str, env: dict) -> tuple:
    """(exit, the report or message, its "plan:" line)."""
    result = home.run(argv_for(program, kind, True), env)
    if result.returncode != 0:
        return result.returncode, result.stderr, ""
    [source] = [line for line in result.stdout.splitlines() if line.startswith(PLAN_LINE)]
    return 0, result.stdout, source


def without_source(report: str) -> str:
    return "".join(line for line in report.splitlines(True) if not line.startswith(PLAN_LINE))


def plan_cache(home: Home) -> Path:
    return home.home / ".local/state/agent-sandbox/cache/plans"


def record_case(home: Home, program: str, case: tuple) -> tuple:
    """(exit, the cached report, the compiled report), normalised, of one case."""
    backend, home_mode, network, kind, chaperon = case
    # JOB_NETWORK_MODE is no environment override: the user's file sets it.
    home.write(".config/agent-sandbox/sandbox.conf",
               f"JOB_NETWORK_MODE={network}\nCHAPERON={str(chaperon == 'chaperon').lower()}\n",
               0o644)
    time.sleep(SETTLED_S)
    env = home.env(kind, SANDBOX_BACKEND=backend, HOME_ACCESS=home_mode, NETWORK_MODE=network)
    name = "/".join(case)
    # (the "cached" report of a case whose launches store nothing says
    # "compiled now": it is recorded so, that behaviour kept too)
    for attempt in range(3):
        launch = home.run(argv_for(program, kind, False), env)
        code, cached, source = dry_run(home, program, kind, env)
        if code or source.startswith(HIT):
            break
        time.sleep(SETTLED_S)     # a launch that changed a file it reads stores nothing
    if code:
        assert launch.returncode == code, (name, launch.returncode, launch.stderr, cached)
        text = normalise(cached, home, program)
        return code, text, text
    assert launch.returncode == 0, (name, launch.stderr)
    shutil.rmtree(plan_cache(home))
    code, compiled, source = dry_run(home, program, kind, env)
    assert code == 0 and source.startswith(MISS), (name, code, source, compiled)
    cached, compiled = normalise(cached, home, program), normalise(compiled, home, program)
    # A dry run starts no service: its compile has no chaperon and no agent
    # session copy, and the plan a launch stored has those that launch
    # started (their directories, the copy's configuration and variables).
    if chaperon != "chaperon" and not kind.startswith("profile"):
        assert without_source(cached) == without_source(compiled), \
            f"{name}: the cached plan is not the compiled one:\n" + \
            "".join(difflib.unified_diff(compiled.splitlines(True), cached.splitlines(True),
                                         "compiled", "cached"))
    return 0, cached, compiled


def host() -> dict:
    """What the plans depend on of the host, beside the code: a corpus is
    compared only on a host that matches (the entries of / are firejail's
    blacklist; the Landlock ABI is in the report; Slurm's binaries are hidden)."""
    from ctypes import CDLL, c_void_p

    try:
        abi = CDLL(None, use_errno=True).syscall(444, c_void_p(None), 0, 1)
    except OSError:
        abi = -1
    return {"root": sorted(os.listdir("/")), "landlock_abi": abi,
            "slurm": sorted(n for n in ("sbatch", "srun", "squeue") if shutil.which(n)),
            "python": "%d.%d" % sys.version_info[:2]}


def sections(text: str) -> list:
    """A report cut before each line that does not start with a space."""
    out: list = []
    for line in text.splitlines():
        if not out or not line.startswith(" "):
            out.append([])
        out[-1].append(line)
    return out


def record(program: str | None = None) -> dict:
    """{"host": host(), "sections": {id: lines},
    "cases": {case: {"exit", "cached", "compiled"}}} (reports as lists of section ids)."""
    program = program or installed()
    home = Home(plans_user())
    home.rebuild()
    pieces: dict = {}
    cases: dict = {}
    try:
        for case in CASES:
            code, *texts = record_case(home, program, case)
            entry = cases["/".join(case)] = {"exit": code}
            for way, text in zip(("cached", "compiled"), texts):
                entry[way] = []
                for lines in sections(text):
                    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:10]
                    pieces[digest] = lines
                    entry[way].append(digest)
    finally:
        home.rebuild()    # nothing of the launches left behind (its plan cache, state)
    return {"host": host(), "sections": pieces, "cases": cases}


def report(corpus: dict, case: str, way: str) -> str:
    """A case's report (way: cached or compiled), put back together from its sections."""
    return "\n".join(line for ref in corpus["cases"][case][way]
                     for line in corpus["sections"][ref]) + "\n"


def write(corpus: dict) -> None:
    """One case and one section a line, so that a change reviews as a diff."""
    def block(items: dict) -> str:
        return ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in items.items())
    FIXTURE.write_text(
        "{\n" + f'"host": {json.dumps(corpus["host"], sort_keys=True)},\n'
        + '"cases": {\n' + block(corpus["cases"]) + "\n},\n"
        + '"sections": {\n' + block(dict(sorted(corpus["sections"].items()))) + "\n}\n}\n")


if __name__ == "__main__":
    start = time.monotonic()
    corpus = record()
    if "--write" in sys.argv:
        write(corpus)
    print(f"{len(corpus['cases'])} cases, {len(corpus['sections'])} distinct sections, "
          f"{time.monotonic() - start:.1f} s", file=sys.stderr)
