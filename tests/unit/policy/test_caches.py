"""policy/caches.py and its rule in the resolver: the user's package stores
are never writable inside; the tools use the sandbox's own cache (issue 27 §1)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent_sandbox.errors import PolicyError
from agent_sandbox.policy import caches
from agent_sandbox.policy.resolve import resolve_policy
from tests.support.homes import context, settings_for


def policy_for(home: Path, conf: str = "", environ=None, **ctx):
    env = {"PATH": "/usr/bin:/bin", **(environ or {})}
    return resolve_policy(settings_for(home, conf), context(home, environ=env, **ctx),
                          backend="bwrap")


def places(home, environ=None) -> dict:
    return dict(caches.user_stores(str(home), environ or {}))


def test_the_table_names_every_tool_once_and_uv_links():
    tools = [s.tool for s in caches.STORES]
    assert len(tools) == len(set(tools))
    assert {"uv", "pip", "npm", "pnpm", "conda"} <= set(tools)
    linking = {s.tool for s in caches.STORES if s.links}
    assert {"uv", "pnpm", "conda"} <= linking


def test_user_stores_defaults_xdg_and_the_callers_variables(home, tmp_path):
    found = places(home)
    assert found[str(home / ".cache/uv")] == "uv" and found[str(home / ".npm")] == "npm"
    assert found[str(home / ".local/share/pnpm")] == "pnpm"
    assert found[str(home / "miniconda3/pkgs")] == "conda"
    moved = places(home, {"XDG_CACHE_HOME": str(tmp_path / "xc"),
                          "UV_CACHE_DIR": str(tmp_path / "scratch/uv"),
                          "CONDA_PKGS_DIRS": f"{tmp_path}/p1,{tmp_path}/p2",
                          "PIP_CACHE_DIR": "relative/ignored"})
    assert moved[str(tmp_path / "xc/uv")] == "uv"
    assert moved[str(tmp_path / "scratch/uv")] == "uv"
    assert moved[str(tmp_path / "p1")] == moved[str(tmp_path / "p2")] == "conda"
    assert not any(p.endswith("relative/ignored") for p in moved)


def test_a_store_reached_through_a_link_is_a_store_where_it_lands(home, tmp_path):
    (tmp_path / "scratch-cache").mkdir()
    (home / ".cache/uv").rename(tmp_path / "scratch-cache/uv")
    (home / ".cache/uv").symlink_to(tmp_path / "scratch-cache/uv")
    stores = caches.user_stores(str(home), {})
    assert caches.store_of(str(tmp_path / "scratch-cache/uv/wheels"), stores) == "uv"


def test_writable_rule_names_the_tool_and_leaves_others_alone(home):
    stores = caches.user_stores(str(home), {})
    why = caches.writable_rule(str(home / ".cache/uv/archive-v0"), stores)
    assert "uv's package store" in why and "own cache" in why
    assert caches.writable_rule(str(home / ".cache/tool"), stores) is None
    assert caches.writable_rule(str(home / ".cache"), stores) is None   # contains, is not one


def test_own_cache_is_per_project_hidden_and_stable(home, tmp_path):
    a = caches.own_cache(str(home), str(home / "proj"))
    assert a == caches.own_cache(str(home), str(home / "proj"))
    assert a != caches.own_cache(str(home), str(home / "proj2"))
    assert a.startswith(str(home / ".local/state/agent-sandbox-caches/proj-"))
    odd = caches.own_cache(str(home), str(tmp_path / "..x y\n"))
    assert "\n" not in odd and " " not in os.path.basename(odd)
    env = caches.inside_env(a)
    assert env["UV_CACHE_DIR"] == a + "/uv" and env["UV_LINK_MODE"] == "copy"
    assert env["PIP_CACHE_DIR"] == a + "/pip" and env["CONDA_PKGS_DIRS"] == a + "/conda"
    assert all(v.startswith(a) for k, v in env.items() if k.endswith(("DIR", "cache")))


# ---------------------------------------------------------------- in the resolver
def test_a_granted_store_is_dropped_with_a_warning(home):
    policy = policy_for(home, "HOME_WRITABLE+=(.cache/uv .cache/pip/http .cache/tool)\n")
    assert policy.home_writable == (str(home / ".cache/tool"),)
    warnings = [w for w in policy.warnings if w.startswith("HOME_WRITABLE: dropped")]
    assert len(warnings) == 2 and all("package store" in w for w in warnings)


def test_an_extra_writable_store_is_dropped_too(home):
    policy = policy_for(home, f"EXTRA_WRITABLE_PATHS=({home / '.cache/pip'})\n")
    assert str(home / ".cache/pip") not in policy.extra_writable
    assert any("EXTRA_WRITABLE_PATHS: dropped" in w and "pip" in w for w in policy.warnings)


@pytest.mark.parametrize("conf", ["HOME_WRITABLE=(.cache)\n", "HOME_ACCESS=write\n"])
def test_stores_inside_a_writable_tree_stay_read_only(home, conf):
    policy = policy_for(home, conf)
    assert str(home / ".cache/uv") in policy.readonly_overlays
    assert str(home / ".cache/pip") in policy.readonly_overlays
    assert str(home / ".cache/tool") not in policy.readonly_overlays


def test_the_tools_inside_use_the_sandboxs_own_cache_whatever_the_caller_says(home):
    policy = policy_for(home, "SANDBOX_ENV=(UV_CACHE_DIR=/elsewhere X=1)\n",
                        environ={"UV_CACHE_DIR": str(home / ".cache/uv"), "UV_LINK_MODE": "hardlink"})
    assert policy.env["UV_CACHE_DIR"] == policy.package_cache + "/uv"
    assert policy.env["UV_LINK_MODE"] == "copy" and policy.env["X"] == "1"
    assert policy.package_cache in policy.extra_writable and policy.is_hidden(policy.package_cache)
    assert any(w.startswith("SANDBOX_ENV: UV_CACHE_DIR ignored") for w in policy.warnings)


def test_a_project_inside_a_store_is_refused(home):
    store = home / ".cache/uv/proj"
    store.mkdir()
    with pytest.raises(PolicyError, match="uv's package store"):
        policy_for(home, cwd=store)


def test_a_store_the_callers_variable_puts_in_the_project_stays_read_only(home):
    (home / "proj" / ".uv-cache").mkdir()
    policy = policy_for(home, environ={"UV_CACHE_DIR": str(home / "proj/.uv-cache")})
    assert str(home / "proj/.uv-cache") in policy.readonly_overlays


def test_a_missing_store_in_a_writable_tree_is_made_and_kept_read_only(home):
    (home / ".cache").mkdir(exist_ok=True)
    stores = caches.user_stores(str(home), {})
    missing = caches.missing_inside_writable(stores, (str(home / ".cache"),), str(home))
    assert str(home / ".cache/yarn") in missing and str(home / ".cache/deno") in missing
    assert all(p.startswith(str(home / ".cache") + "/") for p in missing), missing
    assert caches.missing_inside_writable(stores, (str(home / "elsewhere"),), str(home)) == ()
    made = []

    def make(base, place):
        made.append(place)
        os.makedirs(place, exist_ok=True)

    policy = resolve_policy(settings_for(home, "HOME_WRITABLE=(.cache)"),
                            context(home, environ={"PATH": "/usr/bin:/bin"}),
                            backend="bwrap", make_store=make)
    assert str(home / ".cache/yarn") in made
    assert str(home / ".cache/yarn") in policy.readonly_overlays
