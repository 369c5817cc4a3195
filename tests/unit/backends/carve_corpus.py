"""The carve-equivalence corpus: what every backend makes of a set of policies.

Recorded once on the code before the backend protocol and the single carve
walker (redesign step 3) and kept as a fixture (carve_corpus.json), so the
refactor is proven to yield exactly the old bwrap mounts and argv, firejail
profile and argv, and Landlock rules. Re-record only for an intended change:

    python -m tests.unit.backends.carve_corpus --write

Each case is a home mode × a layout. The trees are real (tests/support/homes.py:
credentials, config, symlinks into hidden paths), built in a temporary
directory whose name is replaced by <ROOT> in the record. PRIVATE_TMP stays
on: a shared /tmp holds the corpus's own hidden paths, so Landlock would
carve it and list whatever else the host keeps there.
"""
from __future__ import annotations

import json
import marshal
import os
import sys
import tempfile
from pathlib import Path

import agent_sandbox

from agent_sandbox.backends.base import Payload
from agent_sandbox.launch import report
from agent_sandbox.policy.resolve import resolve_policy
from tests.support.homes import HOME_MODES, context, make_home, settings_for

FIXTURE = Path(__file__).with_name("carve_corpus.json")
# Where the package lives (the helper's folder is in argv): not part of the record.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(agent_sandbox.__file__)))
ROOT_ENTRIES = ("usr", "etc", "home", "tmp", "proc", "srv", "data", "bin", "opt", "lib")
# A fixed mount table (bwrap's plan moves binds carrying submounts late): not the host's.
HOST_MOUNTS = frozenset({"/", "/proc", "/dev", "/sys", "/sys/fs/cgroup"})
ABIS = (0, 6)
SECCOMP = Payload(data=b"\x06\x00\x00\x00\x00\x00\xff\x7f")


def _layout_default(root: Path, home: Path) -> tuple[str, dict]:
    return "", {}


def _layout_hidden_in_granted(root: Path, home: Path) -> tuple[str, dict]:
    # .config holds hidden .config/gh and git credentials; .local holds the state tree
    return ("HOME_READONLY=(.config .ssh sshlink notes.txt)\n"
            "HOME_WRITABLE=(.local .cache)\n"), {}


def _layout_extra_writable(root: Path, home: Path) -> tuple[str, dict]:
    data = root / "data" / "shared"
    (data / "secret").mkdir(parents=True)
    (data / "secret" / "key").write_text("k")
    (data / "ok").mkdir()
    (data / "ok" / "file").write_text("f")
    (data / "to-secret").symlink_to(data / "secret")
    (home / "scratch").mkdir()
    return (f"EXTRA_WRITABLE_PATHS=({data} ~/scratch)\n"
            f"EXTRA_BLOCKED_PATHS=({data}/secret)\n"), {}


def _layout_protected(root: Path, home: Path) -> tuple[str, dict]:
    proj = home / "proj"
    (proj / ".envrc").write_text("export X=1")
    (proj / ".vscode").mkdir()
    (proj / ".vscode" / "settings.json").write_text("{}")
    (proj / "Makefile").symlink_to(home / ".ssh" / "id_rsa")     # a protected name, a link
    return "PROTECTED_PATHS=(.envrc .vscode .idea Makefile .missing-one)\n", {}


def _layout_nested_hidden(root: Path, home: Path) -> tuple[str, dict]:
    work = home / "work"       # a writable tree with hidden paths nested in it
    (work / "data" / "private" / "deep").mkdir(parents=True)
    (work / "data" / "private" / "deep" / "k").write_text("k")
    (work / "data" / "public").mkdir()
    (work / "data" / "public" / "p").write_text("p")
    (work / "data" / "private" / "inner").mkdir()
    (work / "to-private").symlink_to(work / "data" / "private")
    (home / "proj" / "to-private").symlink_to(work / "data" / "private")
    (home / ".config" / "other" / "nested" / "hide").mkdir(parents=True)
    return (f"EXTRA_BLOCKED_PATHS=({work}/data/private {work}/data/private/deep "
            f"{home}/.config/other/nested/hide)\n"
            "HOME_WRITABLE=(work)\n"
            "HOME_READONLY=(.config/other notes-link keys key-file)\n"), {}


def _layout_outside_home(root: Path, home: Path) -> tuple[str, dict]:
    proj = root / "srv" / "work" / "proj"
    (proj / ".git" / "hooks").mkdir(parents=True)
    (proj / ".git" / "config").write_text("[core]")
    (proj / "src").mkdir()
    (proj / "src" / "a.py").write_text("a")
    (proj / "home-keys").symlink_to(home / ".ssh")
    return f"ALLOWED_PROJECT_PARENTS=({root}/srv {home})\n", {"project_dir": proj, "cwd": proj}


def _layout_seeded(root: Path, home: Path) -> tuple[str, dict]:
    return ("HOME_SEEDED_FILES=(.gitconfig .bashrc)\n"
            "HOME_READONLY=(.local/bin .config/git)\n"
            "PRIVATE_IPC=false\nNETWORK_MODE=isolated\n"), {}


LAYOUTS = {
    "default": _layout_default,
    "hidden-in-granted": _layout_hidden_in_granted,
    "extra-writable": _layout_extra_writable,
    "protected": _layout_protected,
    "nested-hidden": _layout_nested_hidden,
    "outside-home": _layout_outside_home,
    "seeded": _layout_seeded,
}


def _payloads() -> dict:
    payloads = {"seccomp": SECCOMP, "marker": Payload(data=b"session=sess-0001\n")}
    for name in ("etc-passwd", "etc-group", "etc-nsswitch.conf"):
        payloads[name] = Payload(data=b"root:x:0:0::/root:/bin/sh\n")
    return payloads


def plan(name: str, policy, abi: int, payloads: dict):
    """The backend's plan, through the backend protocol."""
    from agent_sandbox.backends import BACKENDS, PlanContext

    program = "/usr/bin/python3" if name == "landlock" else f"/usr/bin/{name}"
    context = PlanContext(program=program, landlock_abi=abi, root_entries=ROOT_ENTRIES,
                          host_mounts=HOST_MOUNTS)
    return BACKENDS[name].plan(policy, ["claude", "--resume"], payloads, context=context)


def _record_plan(name: str, plan_, abi: int) -> dict:
    out = {"argv": [str(a) for a in plan_.argv], "provides": list(plan_.provides),
           "payloads": sorted(plan_.payloads)}
    if abi:           # the view does not depend on the ABI: recorded once, at 0
        return out
    out.update(view=[report._mount_line(op) for op in plan_.mounts],
               partial=[list(p) for p in plan_.partial],
               cannot=[c[0] for c in plan_.cannot], notes=list(plan_.notes))
    if name == "bwrap":
        out["ops"] = [list(op) for op in plan_.mounts]
    elif name == "firejail":
        out["profile"] = plan_.payloads["profile"].data.decode()
        del out["view"]                     # the profile's lines, one for one
        out["seeds"] = {k: v.path for k, v in plan_.payloads.items() if k.startswith("seed-")}
    else:
        spec = marshal.loads(plan_.payloads["landlock"].data)
        out["rules"] = [[access, path] for access, path in spec["paths"]]
    return out


def record() -> dict:
    """{case: {backend: {abi: record}}} with the build root replaced by <ROOT>."""
    cases = {}
    old_umask = os.umask(0o022)
    try:
        for layout, build in LAYOUTS.items():
            for mode in HOME_MODES:
                with tempfile.TemporaryDirectory(prefix="carve-") as tmp:
                    root = Path(tmp) / "r"
                    home = make_home(root, symlinks=True)
                    conf, where = build(root, home)
                    settings = settings_for(home, f"HOME_ACCESS={mode}\n" + conf)
                    settings = settings.replace(READONLY_MOUNTS=("/usr", "/etc"))
                    ctx = context(home, **where)
                    case = {}
                    for name in ("bwrap", "firejail", "landlock"):
                        policy = resolve_policy(settings, ctx, backend=name)
                        if name == "landlock":
                            # Landlock grants /etc entry by entry around the
                            # host's /etc/slurm (issue 32): every file made in
                            # /etc would change the record. The home's carving
                            # is what this corpus is about.
                            policy = policy._replace(slurm_masks=())
                        case[name] = {str(abi): _record_plan(
                            name, plan(name, policy, abi, _payloads()), abi) for abi in ABIS}
                    # (its name holds a digest of the project's path, which
                    # names the temporary root when the project is outside the home)
                    text = json.dumps(case).replace(policy.package_cache, "<PACKAGE_CACHE>")
                    text = text.replace(str(root), "<ROOT>").replace(
                        PACKAGE_PARENT, "<SOURCE>")
                    cases[f"{layout}/{mode}"] = json.loads(text)
    finally:
        os.umask(old_umask)
    return cases


if __name__ == "__main__":
    corpus = record()
    if "--write" in sys.argv:
        FIXTURE.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}"
                                               for k, v in sorted(corpus.items())) + "\n}\n")
    print(f"{len(corpus)} cases × 3 backends × {len(ABIS)} ABIs", file=sys.stderr)
