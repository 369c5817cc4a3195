"""Run by test_jobcache.py inside a Slurm step, as the test user, with the
installed interpreter: what a job launch takes from the compiled plan cache
beside what a fresh compile gives, as JSON (every field of the policy and
the plan, payload bytes included; each launch's own session id masked).

    python jobcache_probe.py plan PROJECT BACKEND   a launch's plan (run.run)
    python jobcache_probe.py join PROJECT BACKEND   a joining task's resolve
"""
import json
import os
import sys

from agent_sandbox.plancache import jobs as jobcache
from agent_sandbox.launch import run


def plain(value, session: str):
    if isinstance(value, str):
        return value.replace(session, "<session>")
    if isinstance(value, bytes):
        return plain(value.decode("latin-1"), session)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {name: plain(item, session) for name, item in zip(value._fields, value)}
    if isinstance(value, (tuple, list)):
        return [plain(item, session) for item in value]
    if isinstance(value, (set, frozenset)):
        return sorted(plain(item, session) for item in value)
    if isinstance(value, dict):
        return {str(k): plain(v, session) for k, v in value.items()}
    return value


def main(mode: str, project: str, backend: str) -> dict:
    backend = None if backend == "auto" else backend
    if mode == "plan":
        cache = run._plan_cache((project, backend, (), False, True, None), os.environ)
        hit = run._from_cache(cache, (), True, [])
        fresh = run.prepare(["true"], project_dir=project, backend=backend,
                            environ=os.environ, job=True, command_slot=True)
        dump = [None if p is None else
                plain({"policy": p.policy, "plan": run.with_command(p, ["true"]).plan,
                       "denied": p.denied}, p.policy.session_id) for p in (hit, fresh)]
    else:
        _, selection, policy = jobcache.cached_resolve(run.resolve, run.environ_home())(
            project_dir=project, backend=backend, environ=os.environ, job=True)
        hit = _ is None
        _, fresh_selection, fresh = run.resolve(project_dir=project, backend=backend,
                                                environ=os.environ, job=True)
        dump = [plain({"selection": selection, "policy": policy}, policy.session_id)
                if hit else None,
                plain({"selection": fresh_selection, "policy": fresh}, fresh.session_id)]
    return {"cache": type(cache).__name__ if mode == "plan" else "JobCache",
            "cached": dump[0], "fresh": dump[1],
            "environ": {k: v for k, v in os.environ.items() if k in jobcache.PER_TASK}}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])))
