"""Report the agents' and editors' project configuration a session made or
changed, at any depth in the project (issue 27, docs/shared-channels.md §2).

What agents and editors load from a directory and obey is one table,
names.PROJECT_CONFIGS (settings naming hooks and MCP servers, plugins,
skills, tasks …). Its entries at the project's root are read-only in every
session on bwrap and firejail (policy/resolve.py adds them to the protected
paths). A copy in a subdirectory cannot be kept from being made: bwrap and
firejail bind what exists when the sandbox starts, and no backend can refuse
a name at any depth ahead of time (Landlock has no deny rule; there the root
entries stay writable too). Claude Code started in `sub/` obeys
`sub/.claude/settings.json`, Codex every `.codex/` from the project's root
to its working directory. So what a session made is found when it ends and
reported, as nested git repositories are (services/gitcheck.py, which calls this
module from its start, end and recovery, so that `agent-sandbox status` and
the next launch after a killed launcher report it too):

- `snapshot(project)` (launch): a bounded walk of the project that never
  follows a symlink and does not enter `.git`; for every entry of the table
  found in any directory, a fingerprint of each file below it (its content's
  digest, or its size, ctime and inode beyond 1 MiB or once the walk has
  read 64 MiB — each inode is read once, so thousands of links to one large
  file cost one read; a symlink's target).
- `evaluate(project, before)` (end): the walk again; every file that is new
  or changed since the snapshot and not empty (an empty file runs nothing: a
  placeholder) is a Finding — the file, who obeys it, the commands it names
  where the format says (JSON, TOML, the YAML lines naming a command), and
  the command that removes it. Without a snapshot every such file counts
  (fail closed).
- `report(...)`: each finding on stderr and in `config_<session>.log`
  (`agent-sandbox logs`); a walk cut short or a directory it could not list
  is said too.

Entries of names.PROJECT_CONFIGS_REPORTED (`.env`) are never made read-only
(projects write them as data) but are found and reported the same way,
at the root as well.
"""
from __future__ import annotations

import os
import stat

WALK_LIMIT = 200_000     # directory entries looked at
READ_LIMIT = 1 << 20     # larger files are fingerprinted by size and time
HASH_BUDGET = 64 << 20   # bytes read in one walk; beyond, files are known by metadata
# Keys whose values a tool runs or starts (JSON and TOML configurations):
# hooks' and MCP servers' commands, Codex's notify, Claude Code's helpers,
# Dev Containers' lifecycle commands, opencode's plugins.
COMMAND_KEYS = frozenset((
    "command", "args", "notify", "apiKeyHelper", "awsAuthRefresh", "awsCredentialExport",
    "otelHeadersHelper", "initializeCommand", "onCreateCommand", "postCreateCommand",
    "postStartCommand", "postAttachCommand", "updateContentCommand", "plugin",
    "discoveryCommand", "callCommand"))
# aider's YAML options (and their variables in .env) that name commands.
YAML_COMMAND_KEYS = (b"lint-cmd", b"test-cmd", b"lint", b"AIDER_LINT_CMD", b"AIDER_TEST_CMD")


class Finding:
    __slots__ = ("path", "readers", "runs", "remedy")    # remedy: the argv that removes it

    def __init__(self, path: str, readers: str, runs: str, remedy: tuple[str, ...]):
        self.path, self.readers, self.runs, self.remedy = path, readers, runs, remedy

    def __repr__(self) -> str:
        return f"Finding({self.path!r}, {self.readers!r}, {self.runs!r}, {self.remedy!r})"

    def message(self) -> str:
        import shlex

        from agent_sandbox.logfiles import clean

        runs = self.runs if len(self.runs) <= 120 else self.runs[:117] + "..."
        named = f"; it names: {clean(runs)}" if runs else ""
        return (f"agent config: {clean(self.path)} was made or changed in the sandbox — "
                f"{self.readers} obey it outside{named}. Check it, or remove it: "
                f"{clean(shlex.join(self.remedy))}")


class Walk:
    __slots__ = ("files", "complete", "unreadable")   # files: path → (fingerprint, readers)

    def __init__(self, files: dict, complete: bool, unreadable: list):
        self.files, self.complete, self.unreadable = files, complete, unreadable


def _table() -> dict[str, list[tuple[tuple[str, ...], str]]]:
    """First path component → [(the remaining components, readers)]."""
    from agent_sandbox.names import PROJECT_CONFIGS, PROJECT_CONFIGS_REPORTED

    table: dict[str, list] = {}
    for path, readers in PROJECT_CONFIGS + PROJECT_CONFIGS_REPORTED:
        parts = tuple(path.strip("/").split("/"))
        table.setdefault(parts[0], []).append((parts[1:], readers))
    return table


class _Budget:
    """What one walk may read: HASH_BUDGET bytes, each inode once (a session
    could link one large file under thousands of table names)."""
    def __init__(self) -> None:
        self.left = HASH_BUDGET
        self.seen: dict[tuple[int, int], str] = {}


def _fingerprint(path: str, info, budget: _Budget | None = None) -> str | None:
    budget = budget or _Budget()
    if stat.S_ISLNK(info.st_mode):
        try:
            return "link:" + os.readlink(path)
        except OSError:
            return "link:?"
    if not stat.S_ISREG(info.st_mode):
        return None
    if info.st_size == 0:
        return ""
    # Beyond the read limit (or unreadable) a file is known by its metadata:
    # its ctime, which no one but the clock sets — an mtime the session can
    # put back with utimensat after rewriting the file in place.
    if info.st_size > min(READ_LIMIT, budget.left):
        return f"large:{info.st_size}:{info.st_ctime_ns}:{info.st_ino}"
    inode = (info.st_dev, info.st_ino)
    if inode in budget.seen:
        return budget.seen[inode]
    from agent_sandbox.paths import read_regular

    data = read_regular(path, READ_LIMIT)
    if not isinstance(data, bytes):
        return f"unreadable:{info.st_size}:{info.st_ctime_ns}:{info.st_ino}"
    budget.left -= len(data)
    from chaperon.paths import sha256   # _sha256 where built in: no OpenSSL at a launch

    budget.seen[inode] = "sha256:" + sha256(data).hexdigest()
    return budget.seen[inode]


def walk(project: str, limit: int = WALK_LIMIT) -> Walk:
    """Every file of a table entry anywhere in `project` (see the module)."""
    table = _table()
    files: dict[str, tuple[str, str]] = {}
    stack, seen, unreadable = [project], 0, []
    budget = _Budget()

    def add(path: str, readers: str) -> bool:
        """Record `path` (a file, a link, or a directory's files); False at the limit."""
        nonlocal seen
        pending = [path]
        while pending:
            current = pending.pop()
            try:
                info = os.lstat(current)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                try:
                    entries = list(os.scandir(current))
                except OSError:
                    unreadable.append(current)
                    continue
                seen += len(entries)
                if seen > limit:
                    return False
                pending += [e.path for e in entries]
                continue
            found = _fingerprint(current, info, budget)
            if found is not None:
                files[current] = (found, readers)
        return True

    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            continue
        except OSError:
            unreadable.append(directory)
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                return Walk(files, False, unreadable)
            for rest, readers in table.get(entry.name, ()):
                if not add(os.path.join(entry.path, *rest), readers):
                    return Walk(files, False, unreadable)
            if entry.name != ".git" and entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return Walk(files, True, unreadable)


def snapshot(project: str) -> dict[str, str] | None:
    """{path: fingerprint} of the table's files in `project` now; None when
    the walk was cut short (then the end reports every such file)."""
    found = walk(project)
    return {p: f for p, (f, _) in found.files.items()} if found.complete else None


# ---------------------------------------------------------------- what it would run
def _strings(value, out: list, under: bool = False) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _strings(item, out, under or key in COMMAND_KEYS)
    elif isinstance(value, list):
        if under and value and all(isinstance(v, str) for v in value):
            out.append(" ".join(value))
            return
        for item in value:
            _strings(item, out, under)
    elif under and isinstance(value, str) and value:
        out.append(value)


def commands_in(path: str, data: bytes) -> str:
    """The commands a configuration file names, where its format says
    ('' where it does not: a script or a prompt is reported by its path)."""
    name = os.path.basename(path)
    found: list[str] = []
    try:
        if name.endswith((".json", ".jsonc")):
            import json

            _strings(json.loads(data), found)
        elif name.endswith(".toml"):
            try:
                import tomllib
            except ModuleNotFoundError:     # Python < 3.11: its source, a dependency there
                import tomli as tomllib

            _strings(tomllib.loads(data.decode("utf-8", "replace")), found)
        elif name.endswith((".yml", ".yaml")) or name == ".env":
            for line in data.splitlines():
                if line.strip().startswith(YAML_COMMAND_KEYS):
                    found.append(line.strip().decode("utf-8", "replace"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return ""
    return "; ".join(dict.fromkeys(found))


# ---------------------------------------------------------------- evaluation
def evaluate(project: str, before: dict | None) -> tuple[list[Finding], Walk]:
    """(findings, the walk): the table's files in `project` that are new or
    changed since `before` (a snapshot; None: every one) and not empty."""
    found = walk(project)
    findings = []
    for path, (fingerprint, readers) in sorted(found.files.items()):
        if not fingerprint or (before is not None and before.get(path) == fingerprint):
            continue
        runs = ""
        if not fingerprint.startswith(("link:", "large:", "unreadable:")):
            from agent_sandbox.paths import read_regular

            data = read_regular(path, READ_LIMIT)
            runs = commands_in(path, data) if isinstance(data, bytes) else ""
        elif fingerprint.startswith("link:"):
            runs = "a symlink to " + fingerprint[len("link:"):]
        findings.append(Finding(path, readers, runs, ("rm", "--", path)))
    return findings, found


def report(home: str, session: str, project: str, findings: list[Finding], found: Walk,
           out) -> None:
    from agent_sandbox.logfiles import clean

    for finding in findings:
        out.write(f"agent-sandbox: {finding.message()}\n")
    if not found.complete:
        out.write(f"agent-sandbox: agent config: the check for agents' configuration in "
                  f"{clean(project)} stopped after {WALK_LIMIT} entries — files beyond were "
                  "not checked. Check .claude/, .codex/, .gemini/ … there before you start "
                  "an agent below it.\n")
    for directory in found.unreadable:
        out.write(f"agent-sandbox: agent config: {clean(directory)} could not be listed — "
                  "an agent's configuration there was not checked. Make it readable and "
                  "check it before you start an agent below it.\n")
    if not findings:
        return
    import shlex
    import time

    from agent_sandbox.logfiles import TIME_FORMAT, append_records

    stamp = time.strftime(TIME_FORMAT)
    append_records(home, f"config_{session}.log", (
        {"time": stamp, "session": session, "command": "agent-config", "event": "agent-config",
         "project": project, "file": f.path, "readers": f.readers, "value": f.runs,
         "remedy": shlex.join(f.remedy)} for f in findings))


def check(home: str, session: str, project: str, before: dict | None, out) -> None:
    """Evaluate and report (gitcheck's end and recovery call this)."""
    findings, found = evaluate(project, before)
    report(home, session, project, findings, found, out)
