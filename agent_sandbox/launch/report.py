"""What a person sees: the --dry-run report and the startup banner.

Both are plain functions of the policy and the plan. Variable *values* are
never printed (they may be API keys); names are.
"""
from __future__ import annotations

from agent_sandbox.paths import helper_module


def _mount_line(op) -> str:
    """One line of --dry-run's view, by the operation's kind (policy/view.py;
    the kind, not the class: a plan from the cache holds records)."""
    kind = op.kind
    if kind in ("ro-bind", "bind", "dev-bind"):
        return f"{kind:<10} {op.dest}" + ("" if op.src == op.dest else f"  (from {op.src})")
    if kind == "tmpfs":
        return f"{'tmpfs':<10} {op.dest}  (mode {op.mode:04o})"
    if kind == "symlink":
        return f"{'symlink':<10} {op.dest} -> {op.target}"
    if kind in ("ro-data", "file"):
        return f"{kind:<10} {op.dest}  (from {op.payload})"
    from agent_sandbox.policy.view import PROFILE_LINE_KIND, RULE_KIND   # --dry-run only
    if kind == RULE_KIND:
        return f"{_rights(op.access):<10} {op.path}"
    if kind == PROFILE_LINE_KIND:
        return op.line
    return f"{kind:<10} {op.dest}"           # proc, dev, remount-ro


def _shown(arg) -> str:
    """An argv item as --dry-run prints it: a descriptor reference as <fd:NAME>."""
    return arg if isinstance(arg, str) else f"{arg.prefix}<fd:{arg.name}>"


def _rights(access: int) -> str:
    """A Landlock rule's rights in words: rw (create, write, read, exec),
    files (read and write existing files: devices, /proc), ro (read, exec)."""
    ll = helper_module("landlock")

    if access & ll.MAKE_REG:
        return "rw"
    return "files" if access & ll.WRITE_FILE else "ro"


def guarantee_lines(plan) -> list[str]:
    from agent_sandbox.backends.base import GUARANTEE_TEXT   # not on a launch's path

    lines = [f"  yes     {g:<22} {GUARANTEE_TEXT[g]}" for g in plan.provides]
    lines += [f"  partial {g:<22} {why}" for g, why in plan.partial]
    lines += [f"  no      {g:<22} {why}" for g, why in plan.cannot]
    return lines


# How a Slurm job runs (jobs/share.py): where the backend's tasks share
# the job's sandbox, this; else the backend's trait job_line (on landlock the
# settings are helper/jobstart.py's LANDLOCK_JOB_ENV).
JOB_SHARED = ("the batch script and every task on a node share one sandbox (MPI shared "
              "memory and CMA work); a joined task gets no Landlock domain of its own")


def _action(finding, report, backend: str) -> str:
    if finding.action == "blanked":
        return "blanked inside the sandbox"
    if report.mode == "blank" and finding.lines:
        return f"not bound into the sandbox (the {backend} backend cannot bind a blanked copy)"
    return "not bound into the sandbox"


def bound_file_lines(policy, backend: str) -> list[str]:
    """Secrets found in files bound from the home: file, line, what — never the secret."""
    report = policy.bound_file_report
    if report is None:
        return []
    if report.mode == "off":
        return ["secrets in bound files: not checked (SECRETS_IN_BOUND_FILES=off)"]
    out = [f"secrets in bound files (SECRETS_IN_BOUND_FILES={report.mode}): "
           f"{report.checked} checked, {len(report.findings)} found"]
    out += [f"  {f.path} {f.lines or 'the whole file'}: {f.what} — "
            f"{_action(f, report, backend)}" for f in report.findings]
    return out


def bound_file_banner(policy, backend: str) -> str:
    """One line per file that held a secret."""
    report = policy.bound_file_report
    if report is None or not report.findings:
        return ""
    by_file: dict[str, list] = {}
    for finding in report.findings:
        by_file.setdefault(finding.path, []).append(finding)
    out = []
    for path, found in by_file.items():
        action = _action(found[0], report, backend)
        if not found[0].lines:                  # too large to check
            out.append(f"agent-sandbox: {path} is {found[0].what} for secrets — {action}. "
                       "Keep it out of HOME_READONLY/HOME_SEEDED_FILES or make it "
                       "smaller.\n")
            continue
        where = ", ".join(f.lines for f in found)
        what = "; ".join(dict.fromkeys(f.what for f in found))
        out.append(f"agent-sandbox: {path} {where} holds a secret ({what}) — {action}. "
                   "Keep secrets out of files the sandbox gets from your home (see "
                   "SECRETS_IN_BOUND_FILES).\n")
    return "".join(out)


def network_line(policy) -> str:
    """NETWORK_MODE, and in allowlist mode where the relay and the proxy are."""
    if policy.network_isolated:
        return "isolated"
    mode = policy.network_mode
    if mode != "allowlist":
        return mode
    if not policy.egress_socket:
        return "allowlist (egress proxy not started here)"
    brokered = sorted(k for k, v in policy.env.items()
                      if k.endswith("_BASE_URL") and "/broker/" in v)
    return (f"allowlist — relay 127.0.0.1:{policy.relay_port} → egress proxy "
            f"{policy.egress_socket}" + (f"; API keys brokered ({' '.join(brokered)})"
                                         if brokered else ""))


def socket_lines(policy, plan) -> list[str]:
    """The unix sockets found in shown trees (policy/sockets.py): left out of
    a mount view; where the backend cannot confine sockets (landlock), still
    there and connectable."""
    sockets = policy.sockets
    if not sockets:
        return []
    cannot = dict(plan.cannot).get("unix_sockets.confined")
    how = "still connectable: " + cannot.split(":")[0] if cannot \
        else "left out of the view like hidden paths"
    return [f"unix sockets in shown trees ({len(sockets)}; {how}):",
            *(f"  {p}" for p in sockets)]


def dry_run_report(policy, plan, denied) -> str:
    import shlex   # (it imports re: kept off a launch's path)

    from agent_sandbox.traits import traits

    kept = sorted(set(policy.env) | set(plan.env))
    out = [
        "agent-sandbox: dry run — nothing was started",
        f"backend:   {plan.backend}" + (f" ({plan.chosen_because})" if plan.chosen_because
                                        else ""),
        f"project:   {policy.project_dir} (writable; working directory {policy.workdir})",
        f"home:      {policy.home} ({policy.home_access})",
        f"network:   {network_line(policy)}",
        "guarantees:",
        *guarantee_lines(plan),
        f"hidden ({len(policy.hidden)}):",
        *(f"  {p}" for p in policy.hidden),
        *socket_lines(policy, plan),
        f"{plan.view_title} ({len(plan.mounts)}):",
        *(f"  {_mount_line(op)}" for op in plan.mounts),
        f"environment: {len(kept)} kept, {len(policy.env_removed)} removed",
        f"  kept:    {' '.join(kept)}",
        f"  removed: {' '.join(policy.env_removed) or '(none)'}",
        f"seccomp:   {'EPERM for ' + ' '.join(denied) if policy.seccomp else 'off'}",
    ]
    out[out.index("guarantees:"):out.index("guarantees:")] = bound_file_lines(policy,
                                                                              plan.backend)
    if plan.spawn_ruleset:
        out.insert(out.index("guarantees:"),
                   f"scoping:   Landlock ABI {plan.spawn_ruleset['abi']} scopes abstract unix "
                   "sockets and signals, applied to the thread that starts the backend")
    if policy.seccomp:
        out.append("           (personality except the query value; ioctl TIOCSTI/TIOCLINUX)")
    out.append(f"jobs:      {traits(plan.backend).job_line or JOB_SHARED}")
    if plan.notes:
        out.append(f"how {plan.backend} differs from the policy:")
        out += [f"  {n}" for n in plan.notes]
    if policy.warnings:
        out.append("warnings:")
        out += [f"  {w}" for w in policy.warnings]
    out.append("argv:")
    out.append("  " + shlex.join(_shown(a) for a in plan.argv))
    if "argv" in plan.payloads:      # the command travels on a descriptor (firejail)
        command = plan.payloads["argv"].data.split(b"\0")
        out.append("  <fd:argv>: " + shlex.join(c.decode("utf-8", "replace") for c in command))
    return "\n".join(out) + "\n"


def banner(policy, plan) -> str:
    missing = ", ".join(g for g, _ in plan.cannot)
    partial = ", ".join(g for g, _ in plan.partial)
    chosen = f" ({plan.chosen_because})" if plan.chosen_because else ""
    text = (f"agent-sandbox: {plan.backend} sandbox{chosen} — project {policy.project_dir}, "
            f"home {policy.home_access}, {len(policy.env_removed)} variables removed")
    mode = "isolated" if policy.network_isolated else policy.network_mode
    if mode != "open":
        text += f", network {mode}"
    if partial:
        text += f"; partly enforced: {partial}"
    if missing:
        text += f"; not enforced: {missing}"
    if plan.notes:
        text += f"; {len(plan.notes)} differences from the policy (see --dry-run)"
    # A lower Landlock ABI than the sandbox uses (backends/landlock.py's abi_note).
    text += "".join(f"; {n.split(':', 1)[0]} (see --dry-run)" for n in plan.notes
                    if n.startswith("Landlock ABI "))
    return text + "\n" + bound_file_banner(policy, plan.backend)
