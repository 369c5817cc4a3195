"""Agent profiles: `agent-sandbox claude [ARGS]` and friends (SPEC §10).

A profile is a sandbox.conf file with a few extra AGENT_* keys. Its ordinary
keys form a configuration layer right after the shipped defaults — so admin
floors, the user's own file, conf.d, the environment and flags all still
apply on top — and the AGENT_* keys say what to run:

  AGENT_COMMAND       the command (array); the user's ARGS are appended
  AGENT_INSTALL_HINT  what to tell a user whose agent binary is missing
  AGENT_NOTE_PATH     where the read-only "you are in a sandbox" note goes
                      (appended to whatever file is there); empty: no note
  AGENT_STATE         home entries created on first use (trailing / = dir) so
                      logins and history persist in the writable state
  AGENT_CONFIG_DIR    (VARIABLE DIR [MIRROR]): the agent's own variable for its
                      configuration directory and the home directory it
                      names; the agent runs on a session copy of it
                      (agents/copy.py), mirrored at MIRROR in the copy
  AGENT_SETTINGS      (COPY=HOME …): settings files that run on a session copy
                      and are merged back under the guard at exit
  AGENT_SETTINGS_KEEP (COPY:KEY.PATH …): the allow-list of settings keys whose
                      changes are merged back (policy/agentmerge.py); changes
                      to any other key are dropped and reported
  AGENT_SETTINGS_QUIET (COPY:KEY.PATH …): keys known to be inert (UI
                      statistics, caches, notice counters): a change to one
                      that is not kept is dropped without a word at exit (it
                      is in `agent-sandbox logs`); other drops are reported
  AGENT_PROJECT_SETTINGS (PATH …): protected project files the agent saves
                      choices in, edited on a session copy the same way (bwrap)
  AGENT_BROKERS       the API key brokers (services/egress.BROKERS) the agent
                      can use because it takes a base URL (API_KEY_BROKERING;
                      a broker may add options after AGENT_COMMAND)
  AGENT_CONFIG_KEEP   (NAME …, globs, trailing / = dir): the allow-list of
                      entries of the configuration directory writable inside
                      (existing) and moved back at exit (new); every other
                      entry is read-only, new ones dropped and reported
  AGENT_CONFIG_SCRATCH (NAME …): entries that start empty in the copy and are
                      dropped quietly at exit (caches, shell snapshots)
  AGENT_CONFIG_PER_PROJECT (PARENT/{ENCODING} …): state the agent keys by
                      project; only this project's entry is granted and
                      moved back (policy/agentstate.py)
  AGENT_LOGINS        (NAME …): login files of the configuration directory;
                      the session works on the sandbox's own login store,
                      never the real file (agents/copy.py)
  AGENT_TRUST         (FILE:KEY.PATH=VALUE …): what `agent-sandbox trust DIR`
                      writes (outside) to trust a directory, {dir} standing
                      for it; FILE is an AGENT_SETTINGS copy name, VALUE a
                      JSON literal (config/agentkeys.py)
  AGENT_KEY_APPROVAL  (FILE:KEY.PATH=tail:N …): the list in the session copy
                      of FILE where the agent keeps the keys it was told to
                      use (their last N characters): the launcher's own
                      placeholder keys are put there (agents/copy.py)

Profiles are looked up by name in /etc/agent-sandbox/agents/, then
~/.config/agent-sandbox/agents/, then the shipped conf/agents/: adding an agent
is adding a file. A profile runs only when ENABLED_AGENTS names it (bash is
always enabled).
"""
from __future__ import annotations

import os
from typing import NamedTuple

from agent_sandbox.config.load import PROFILE_KEYS
from agent_sandbox.config.syntax import ConfigSyntaxError, parse_config
from agent_sandbox.errors import ConfigError, UsageError

ALWAYS_ENABLED = ("bash",)


class Profile(NamedTuple):
    name: str
    path: str
    text: str
    command: tuple[str, ...]
    install_hint: str
    note_path: str
    state: tuple[str, ...]
    config_dir: tuple[str, ...] = ()
    settings: tuple[str, ...] = ()
    settings_keep: tuple[str, ...] = ()
    project_settings: tuple[str, ...] = ()
    brokers: tuple[str, ...] = ()
    config_keep: tuple[str, ...] = ()
    config_scratch: tuple[str, ...] = ()
    config_per_project: tuple[str, ...] = ()
    logins: tuple[str, ...] = ()
    trust: tuple[str, ...] = ()
    key_approval: tuple[str, ...] = ()
    settings_quiet: tuple[str, ...] = ()


def search_dirs(home: str) -> tuple[str, ...]:
    from agent_sandbox.paths import ADMIN_CONFIG, defaults_path, user_config_dir

    return (os.path.join(os.path.dirname(ADMIN_CONFIG), "agents"),
            os.path.join(user_config_dir(home), "agents"),
            os.path.join(os.path.dirname(defaults_path()), "agents"))


def available(home: str) -> list[str]:
    names = set()
    for directory in search_dirs(home):
        try:
            names.update(n[:-5] for n in os.listdir(directory) if n.endswith(".conf"))
        except OSError:
            pass
    return sorted(names)


def find(name: str, home: str) -> str | None:
    if not name.replace("-", "").replace("_", "").isalnum():
        return None
    for directory in search_dirs(home):
        path = os.path.join(directory, f"{name}.conf")
        if os.path.isfile(path):
            return path
    return None


def unknown_profile_message(name: str, profiles) -> str:
    """`name` is neither a subcommand nor a profile: suggest the closest of
    both (a typo'd `doctr` means doctor), then list the profiles."""
    import difflib  # only on this error path

    from agent_sandbox.names import SUBCOMMANDS

    close = difflib.get_close_matches(name, [*SUBCOMMANDS, *profiles], n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return (f"unknown command or agent profile {name!r} — {hint}profiles here: "
            f"{' '.join(profiles)}; commands: {' '.join(SUBCOMMANDS)}. Add {name}.conf to "
            "~/.config/agent-sandbox/agents/ to define a profile "
            "(`agent-sandbox --help` lists the commands).")


def load(name: str, *, home: str, user: str, known_keys) -> Profile:
    path = find(name, home)
    if path is None:
        raise UsageError(unknown_profile_message(name, available(home)),
                         reason="unknown_profile")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        assignments = parse_config(text, file=path, variables={"HOME": home, "USER": user},
                                   known_keys=set(known_keys) | PROFILE_KEYS)
    except ConfigSyntaxError as exc:
        raise ConfigError(str(exc), reason="bad_config_syntax") from None
    values = {a.key: a.value for a in assignments if a.key in PROFILE_KEYS}

    def as_tuple(value) -> tuple[str, ...]:
        return value if isinstance(value, tuple) else ((value,) if value else ())

    command = as_tuple(values.get("AGENT_COMMAND", ()))
    if not command:
        raise ConfigError(f"{path}: AGENT_COMMAND is missing — a profile must say what to "
                          "run, e.g. AGENT_COMMAND=(claude)", reason="bad_profile")
    note = values.get("AGENT_NOTE_PATH", "")
    config_dir = as_tuple(values.get("AGENT_CONFIG_DIR", ()))
    if config_dir and len(config_dir) not in (2, 3):
        raise ConfigError(f"{path}: AGENT_CONFIG_DIR must be (VARIABLE DIR [MIRROR]), e.g. "
                          "(CODEX_HOME .codex)", reason="bad_profile")
    keep = as_tuple(values.get("AGENT_SETTINGS_KEEP", ()))
    _check_keep(path, keep)
    per_project = as_tuple(values.get("AGENT_CONFIG_PER_PROJECT", ()))
    logins = as_tuple(values.get("AGENT_LOGINS", ()))
    _check_state(path, per_project, logins)
    return Profile(name, path, text, command, str(values.get("AGENT_INSTALL_HINT", "")),
                   note if isinstance(note, str) else "", as_tuple(values.get("AGENT_STATE", ())),
                   config_dir, as_tuple(values.get("AGENT_SETTINGS", ())),
                   keep, as_tuple(values.get("AGENT_PROJECT_SETTINGS", ())),
                   as_tuple(values.get("AGENT_BROKERS", ())),
                   as_tuple(values.get("AGENT_CONFIG_KEEP", ())),
                   as_tuple(values.get("AGENT_CONFIG_SCRATCH", ())),
                   per_project, logins, _checked_entries(path, "AGENT_TRUST", values),
                   _checked_entries(path, "AGENT_KEY_APPROVAL", values),
                   as_tuple(values.get("AGENT_SETTINGS_QUIET", ())))


def _checked_entries(path: str, key: str, values) -> tuple[str, ...]:
    """AGENT_TRUST / AGENT_KEY_APPROVAL entries, each FILE:KEY.PATH=VALUE."""
    from agent_sandbox.config.agentkeys import entry_problem

    value = values.get(key, ())
    entries = value if isinstance(value, tuple) else ((value,) if value else ())
    for entry in entries:
        problem = entry_problem(key, entry)
        if problem:
            raise ConfigError(f"{path}: {key} entry {entry!r}: {problem}", reason="bad_profile")
    return entries


def _check_keep(path: str, keep) -> None:
    """Every kept settings key is typed and constrained: a free-text value
    (`=str`) is words the agent reads later, outside the sandbox too (its
    system prompt carries `language`, the model name): refused here, with
    the kinds that are allowed (policy/agentmerge.py)."""
    from agent_sandbox.config.agentkeys import pattern_problem

    for entry in keep:
        file, sep, pattern = entry.partition(":")
        problem = pattern_problem(pattern) if sep and file else "not FILE:KEY.PATH=TYPE"
        if problem:
            raise ConfigError(f"{path}: AGENT_SETTINGS_KEEP entry {entry!r}: {problem} — a "
                              "kept settings key must hold a constrained value, never free "
                              "text the agent reads as instructions. Give it a kind, e.g. "
                              f"{file or 'settings.json'}:language=language or "
                              "theme=enum(dark|light).", reason="bad_profile")


def _check_state(path: str, per_project, logins) -> None:
    from agent_sandbox.config.agentkeys import parse_per_project

    for entry in per_project:
        try:
            parse_per_project(entry)
        except ValueError as exc:
            raise ConfigError(f"{path}: AGENT_CONFIG_PER_PROJECT entry {entry!r}: {exc} — "
                              "name the directory and how the agent names a project in it, "
                              "e.g. 'projects/{path-dashed}'.", reason="bad_profile") from None
    for name in logins:
        if not name or "/" in name or name in (".", ".."):
            raise ConfigError(f"{path}: AGENT_LOGINS entry {name!r} is not a file name of the "
                              "configuration directory, e.g. .credentials.json.",
                              reason="bad_profile")


def note_text(policy, *, slurm: bool) -> str:
    """The short note an agent reads about its sandbox."""
    writable = [policy.project_dir, *policy.home_writable, *policy.extra_writable]
    lines = [
        "# You are running inside agent-sandbox",
        "",
        "This session runs in a kernel-enforced sandbox:",
        f"- Writable: {', '.join(writable)}. Everything else is read-only; writes "
        "elsewhere fail with 'Read-only file system'. $HOME is a private, throw-away "
        "copy unless listed above." if policy.home_access != "write" else
        f"- Writable: {', '.join(writable)} and your home (credentials excepted).",
        "- Credentials (~/.ssh, ~/.aws, tokens in the environment, …) do not exist here. "
        "Do not try to find them; ask the user to run such steps outside the sandbox.",
        "- Some project files stay read-only on purpose (.git/hooks, .git/config, .envrc, "
        "editor and agent settings): do not try to change them.",
    ]
    if slurm:
        lines += [
            "- Slurm works as usual (sbatch, srun, squeue, sinfo, …) through a proxy: jobs "
            "run in the same sandbox on the compute nodes, you only see this project's "
            "jobs, and job output files must be inside the project.",
            "- A refused command prints one line starting with 'agent-sandbox: <command>:', "
            "saying what was refused, why, and what to do instead. Follow that advice; do "
            "not try to work around it.",
        ]
    else:
        lines.append("- Slurm is not available inside this sandbox.")
    lines.append("- `agent-sandbox explain PATH` (outside) says why a path is hidden or read-only.")
    return "\n".join(lines) + "\n"
