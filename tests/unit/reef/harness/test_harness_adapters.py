"""Each adapter renders the typed tree into its agent's documented layout, by path and
content; a kind an adapter has no place for, an escaping path and a credential are
refused before anything is rendered."""

from __future__ import annotations

import json
import tomllib

import pytest

from reef.harness import (
    ADAPTERS,
    AdapterRefusedError,
    CredentialInTreeError,
    EntryKind,
    HarnessTreeError,
    UnknownAdapterError,
    UnsafeHarnessPathError,
    adapter,
    render_files,
    tree_from_files,
)

RELEASE = {
    "system_prompt.md": "You are the release agent.\n",
    "rules/style.md": "Answer in one line.",
    "rules/dates.md": "Dates are ISO 8601.\n",
    "skills/review.md": "# Review a diff\nRead it twice.\n",
    "skills/deploy/SKILL.md": "---\nname: deploy\ndescription: Ship it\n---\nRun make.\n",
    "commands/fix.md": "Fix the failing test: $ARGUMENTS\n",
    "config/base.json": json.dumps({"model": "m1", "sandbox": {"network": False}}),
    "config/zz-override.json": json.dumps({"model": "m2", "sandbox": {"writable": ["/tmp"]}}),
}
REVIEW_SKILL = (
    '---\nname: review\ndescription: "Review a diff"\n---\n\n# Review a diff\nRead it twice.\n'
)
RULES = "You are the release agent.\n\nDates are ISO 8601.\n\nAnswer in one line.\n"


def test_the_layout_names_each_files_kind() -> None:
    tree = tree_from_files({**RELEASE, "extensions/guard.ts": "export {}\n", "notes/a.md": "x"})
    kinds = {(e.kind, e.name) for e in tree.entries}
    assert kinds == {
        (EntryKind.RULES, "system_prompt"),
        (EntryKind.RULES, "style"),
        (EntryKind.RULES, "dates"),
        (EntryKind.SKILL, "review"),
        (EntryKind.SKILL, "deploy"),
        (EntryKind.AGENT_COMMAND, "fix"),
        (EntryKind.CONFIG, "base"),
        (EntryKind.CONFIG, "zz-override"),
        (EntryKind.CODE_EXTENSION, "guard"),
        (EntryKind.FILE, "notes/a.md"),
    }
    assert tree.entries[0].path == "system_prompt.md"  # the system prompt leads the rules


def test_claude_code_layout() -> None:
    out = render_files(RELEASE, "claude")
    assert sorted(out) == [
        "CLAUDE.md",
        "commands/fix.md",
        "settings.json",
        "skills/deploy/SKILL.md",
        "skills/review/SKILL.md",
    ]
    assert out["CLAUDE.md"] == RULES
    assert out["skills/review/SKILL.md"] == REVIEW_SKILL
    assert out["skills/deploy/SKILL.md"] == RELEASE["skills/deploy/SKILL.md"]  # kept as is
    assert out["commands/fix.md"] == RELEASE["commands/fix.md"]
    assert json.loads(out["settings.json"]) == {
        "model": "m2",
        "sandbox": {"network": False, "writable": ["/tmp"]},
    }
    assert adapter("claude").root_env == "CLAUDE_CONFIG_DIR"


def test_codex_layout() -> None:
    out = render_files(RELEASE, "codex")
    assert sorted(out) == [
        "AGENTS.md",
        "config.toml",
        "prompts/fix.md",
        "skills/deploy/SKILL.md",
        "skills/review/SKILL.md",
    ]
    assert out["AGENTS.md"] == RULES
    assert out["prompts/fix.md"] == RELEASE["commands/fix.md"]
    assert out["skills/review/SKILL.md"] == REVIEW_SKILL
    assert out["config.toml"] == 'model = "m2"\n\n[sandbox]\nnetwork = false\nwritable = ["/tmp"]\n'
    assert tomllib.loads(out["config.toml"]) == {
        "model": "m2",
        "sandbox": {"network": False, "writable": ["/tmp"]},
    }
    assert adapter("codex").root_env == "CODEX_HOME"


def test_generic_layout_is_the_release_as_it_is() -> None:
    release = {
        **RELEASE,
        "extensions/guard.ts": "export {}\n",
        "notes/a.md": "x",
        "skills/bare/SKILL.md": "No front matter.\n",
    }
    assert render_files(release, "generic") == dict(sorted(release.items()))
    assert adapter("generic").root_env is None


@pytest.mark.parametrize("name", ["claude", "codex"])
def test_code_extensions_are_refused_by_agents_without_them(name: str) -> None:
    with pytest.raises(AdapterRefusedError, match=r"code_extension.*extensions/guard\.ts"):
        render_files({**RELEASE, "extensions/guard.ts": "export {}\n"}, name)


@pytest.mark.parametrize("name", ["claude", "codex"])
def test_unclassified_files_are_refused_not_dropped(name: str) -> None:
    with pytest.raises(AdapterRefusedError, match=r"file entries \('notes/a\.md'\)"):
        render_files({**RELEASE, "notes/a.md": "x"}, name)


def test_an_unknown_adapter_names_the_known_ones() -> None:
    with pytest.raises(UnknownAdapterError, match="known: claude, codex, generic"):
        render_files(RELEASE, "pi")
    assert sorted(ADAPTERS) == ["claude", "codex", "generic"]


@pytest.mark.parametrize(
    "path",
    ["../escape.md", "/etc/passwd", "rules/../../x.md", "skills//a.md", "./a.md", "a\\b.md", ""],
)
@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_paths_escaping_the_root_are_refused(path: str, name: str) -> None:
    with pytest.raises(UnsafeHarnessPathError):
        render_files({**RELEASE, path: "x"}, name)


@pytest.mark.parametrize(
    "config",
    [
        {"env": {"ANTHROPIC_API_KEY": "sk-x"}},
        {"model_providers": {"p": {"auth": {"bearer_token": "t"}}}},
        {"apiKeyHelper": "echo sk"},
        {"servers": [{"password": "p"}]},
    ],
)
@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_credentials_are_never_rendered(config: dict[str, object], name: str) -> None:
    with pytest.raises(CredentialInTreeError, match="credentials are never rendered"):
        render_files({**RELEASE, "config/secret.json": json.dumps(config)}, name)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"config/a.json": "[1]"}, "must be a JSON object"),
        ({"config/a.json": "{"}, "is not JSON"),
        ({"config/a.json": '{"x": NaN}'}, "is not JSON"),
        ({"skills/a.md": "x", "skills/a/SKILL.md": "y"}, "both skill 'a'"),
        ({"rules/-bad.md": "x"}, "name '-bad'"),
    ],
)
def test_malformed_trees_are_refused(files: dict[str, str], message: str) -> None:
    with pytest.raises(HarnessTreeError, match=message):
        tree_from_files(files)


def test_config_toml_refuses_what_toml_cannot_say() -> None:
    with pytest.raises(HarnessTreeError, match="no plain TOML form"):
        render_files({"config/a.json": '{"x": null}'}, "codex")
    assert render_files({"config/a.json": '{"x": null}'}, "claude") == {
        "settings.json": '{\n  "x": null\n}\n'
    }
