"""From an observed probe failure to its cause and its fix: one table.

A backend's probe (a trivial sandbox, process/select.py) fails for one of a
few reasons, and each has its own fix; a generic hint ("user namespaces are
probably disabled") sends the user to the wrong person. So the probe keeps
what the program printed, and `explain` walks RULES in order: each row
matches the output and the host's facts (the userns sysctls, the AppArmor
restriction, the program's version), and says the cause and what to do.
The first row that matches wins; none matching leaves the backend's
generic hint (traits.probe_hint) with the program's own last line.

Pure: the facts are read by the caller (process/select.py probe_facts).
"""
from __future__ import annotations

import re
from typing import Callable, NamedTuple

# Where an option first appeared (bubblewrap's NEWS, firejail's RELNOTES),
# for "X is too old for --opt: --opt came in Y".
OPTION_SINCE = {
    "bwrap": {"--disable-userns": "0.8.0", "--perms": "0.5.0", "--chmod": "0.5.0",
              "--clearenv": "0.5.0", "--size": "0.7.0", "--assert-userns-disabled": "0.8.0"},
    "firejail": {"--keep-fd": "0.9.68", "--tab": "0.9.70", "--restrict-namespaces": "0.9.72",
                 "--noinput": "0.9.66"},
    "unshare": {"--map-current-user": "2.35"},
}
MINIMUM = {"bwrap": "bubblewrap 0.4.0", "firejail": "firejail 0.9.64",
           "unshare": "util-linux 2.32"}
# bwrap: "Unknown option --x"; firejail: "invalid --x command line option";
# util-linux: "unrecognized option '--x'".
UNKNOWN_OPTION = re.compile(r"(?:Unknown option |invalid |unrecognized option '?)"
                            r"(--[a-z0-9][a-z0-9-]*)")
MISSING_LIBRARY = re.compile(r"error while loading shared libraries: ([^:]+): cannot open "
                             r"shared object file")


class Facts(NamedTuple):
    backend: str = ""
    program: str = ""              # its path
    version: str = ""              # as it prints it ("bubblewrap 0.4.1"), "" unknown
    max_user_namespaces: str = ""  # the sysctls as read ("" when absent)
    unprivileged_userns_clone: str = ""
    apparmor_restrict: str = ""    # kernel.apparmor_restrict_unprivileged_userns


class Rule(NamedTuple):
    name: str
    matches: Callable[[str, Facts], object]
    explain: Callable[[str, Facts, object], tuple]


def _unknown_option(out: str, f: Facts, match) -> tuple:
    option = match.group(1)
    program = "unshare" if "unshare" in out.split(":", 1)[0] else f.backend
    since = OPTION_SINCE.get(program, {}).get(option)
    who = (f.version or program) if program == f.backend else "util-linux's unshare"
    cause = f"{who} is too old for {option}" + (f" ({since} or newer has it)" if since else "")
    if program == "unshare":
        fix = ("PRIVATE_MOUNTS=true needs `unshare --map-current-user` (util-linux 2.35 or "
               "newer): ask your admin for a newer util-linux (UNSHARE_PATH names it), or set "
               "PRIVATE_MOUNTS=false in ~/.config/agent-sandbox/sandbox.conf or the "
               "environment (mounts the host makes after the start then appear inside: "
               "fs.write_confined partial)")
    else:
        fix = (f"install a newer {f.backend} or have the admin name one with "
               f"{f.backend.upper()}_PATH; agent-sandbox supports {MINIMUM.get(f.backend, '')} "
               "and newer, so please report this as a bug")
    return cause, fix


def _library(out: str, f: Facts, match) -> tuple:
    lib = match.group(1)
    return (f"{f.program or f.backend} cannot start: the shared library {lib} is missing",
            f"install the package that provides {lib} (e.g. apt-get install "
            f"{_package(lib)}), or ask your admin; the next launch probes again")


def _package(lib: str) -> str:
    base = lib.split(".so", 1)[0]
    version = lib.split(".so.", 1)[1].split(".")[0] if ".so." in lib else ""
    return base + version


def _sysctl(name: str, value: str, fix: str):
    return lambda out, f, m: (f"user namespaces are disabled on this host ({name}={value})", fix)


RULES: tuple[Rule, ...] = (
    Rule("missing-library", lambda out, f: MISSING_LIBRARY.search(out), _library),
    Rule("unknown-option", lambda out, f: UNKNOWN_OPTION.search(out), _unknown_option),
    Rule("max-user-namespaces",
         lambda out, f: f.backend != "firejail" and f.max_user_namespaces.strip() == "0",
         _sysctl("user.max_user_namespaces", "0",
                 "ask your admin to raise it (sysctl user.max_user_namespaces=15000), or use "
                 "--backend firejail or landlock")),
    Rule("unprivileged-userns-clone",
         lambda out, f: f.backend != "firejail" and f.unprivileged_userns_clone.strip() == "0",
         _sysctl("kernel.unprivileged_userns_clone", "0",
                 "ask your admin to set kernel.unprivileged_userns_clone=1, or use --backend "
                 "firejail or landlock")),
    Rule("apparmor-userns",
         lambda out, f: f.backend != "firejail" and f.apparmor_restrict.strip() == "1",
         lambda out, f, m: (
             "AppArmor restricts unprivileged user namespaces on this host "
             "(kernel.apparmor_restrict_unprivileged_userns=1) and has no profile allowing "
             f"them for {f.program or f.backend}",
             f"ask your admin for an AppArmor profile that allows userns for {f.program} "
             "(Ubuntu ships /etc/apparmor.d/bwrap-userns-restrict for /usr/bin/bwrap), or "
             "use --backend firejail or landlock")),
    Rule("firejail-users",
         lambda out, f: re.search(r"user is not allowed to use [Ff]irejail", out),
         lambda out, f, m: ("firejail does not allow this user",
                            "ask your admin to add you to /etc/firejail/firejail.users")),
    Rule("no-permission-userns",
         lambda out, f: re.search(r"(No permissions to creat|setting up uid map|"
                                  r"Creating new namespace failed|unshare failed)", out),
         lambda out, f, m: (
             f"{f.program or f.backend} may not make a user namespace here "
             f"({out.strip().splitlines()[-1] if out.strip() else 'no detail'})",
             "ask your admin to allow unprivileged user namespaces (user.max_user_namespaces, "
             "kernel.unprivileged_userns_clone, an AppArmor userns restriction), or use "
             "--backend firejail or landlock")),
)


def explain(output: str, facts: Facts) -> tuple:
    """(rule name, cause, fix) for a failed probe's output, or ("", last line, "")."""
    for rule in RULES:
        match = rule.matches(output, facts)
        if match:
            cause, fix = rule.explain(output, facts, match)
            return rule.name, cause, fix
    lines = output.strip().splitlines()
    return "", lines[-1] if lines else "", ""
