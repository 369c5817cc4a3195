"""A profile's AGENT_SETTINGS_KEEP is typed *and* constrained (issue 27): a
free-text key (`=str`) is refused at load, naming the entry; the shipped
profiles load."""
from __future__ import annotations

import pytest

from agent_sandbox.config.load import known_keys
from agent_sandbox.config.profiles import load
from agent_sandbox.errors import ConfigError


def write_profile(home, text: str) -> None:
    directory = home / ".config" / "agent-sandbox" / "agents"
    directory.mkdir(parents=True)
    (directory / "mine.conf").write_text("AGENT_COMMAND=(mine)\n" + text)


@pytest.mark.parametrize("entry", ["settings.json:language=str", "settings.json:x=strs",
                                   "settings.json:model", "'settings.json:t=enum()'"])
def test_a_free_text_kept_key_is_refused(tmp_path, entry):
    write_profile(tmp_path, f"AGENT_SETTINGS_KEEP=({entry})\n")
    with pytest.raises(ConfigError) as caught:
        load("mine", home=str(tmp_path), user="u", known_keys=known_keys(str(tmp_path), "u"))
    assert "AGENT_SETTINGS_KEEP entry" in str(caught.value)
    assert entry.strip("'") in str(caught.value)


def test_constrained_keys_and_the_shipped_profiles_load(tmp_path):
    write_profile(tmp_path, "AGENT_SETTINGS_KEEP=(settings.json:language=language "
                            "'settings.json:theme=enum(dark|light)' settings.json:n=int)\n")
    keys = known_keys(str(tmp_path), "u")
    assert len(load("mine", home=str(tmp_path), user="u", known_keys=keys).settings_keep) == 3
    for name in ("claude", "codex", "gemini", "opencode", "aider", "bash"):
        load(name, home=str(tmp_path), user="u", known_keys=keys)
