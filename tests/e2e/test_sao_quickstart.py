"""The seed quickstart's weight-recipe line starts.

The quickstart: copy ``recipes/basic/external-provider.yaml``, set
``reef.recipe: recipes.sao.recipe:SAORecipe`` and serve the copy. Only the address and
the state dir differ from the seed (a free loopback port, a temporary folder).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from reef.testing.servers import REPO_ROOT, running_reef

QUICKSTART_LINE = "recipe: recipes.sao.recipe:SAORecipe"


def quickstart_copy(folder: Path) -> Path:
    """``external-provider.yaml`` with the seed's recipe line instead of ``recipe: core``."""
    template = (REPO_ROOT / "recipes" / "basic" / "external-provider.yaml").read_text()
    lines = [
        line.replace(line.strip(), QUICKSTART_LINE) if line.strip().startswith("recipe:") else line
        for line in template.splitlines()
    ]
    assert sum(QUICKSTART_LINE in line for line in lines) == 1, template
    copy = folder / "my-provider.yaml"
    copy.write_text("\n".join(lines) + "\n")
    return copy


def test_the_seed_quickstart_serves_with_the_sao_recipe(tmp_path: Path) -> None:
    config = quickstart_copy(tmp_path)
    env = {"REEF_TOKEN": "reef-local", "REEF_UPSTREAM_API_KEY": "sk-not-used"}
    with running_reef(["-c", str(config)], env=env, state_dir=tmp_path / "state") as served:
        assert httpx.get(f"{served.base_url}/healthz", timeout=10).json() == {"ok": True}
        status = httpx.get(
            f"{served.base_url}/reef/status",
            headers={"Authorization": "Bearer reef-local"},
            timeout=10,
        ).json()
        stderr = served.managed.stderr_text()
    assert status["trainer"]["error"] is None, status["trainer"]
    # the provider records no token data: sao says so at start instead of failing later
    assert "sao trains only on exchanges whose engine recorded token ids" in stderr, stderr
    assert "no upstream is configured" not in stderr, stderr


def test_the_sao_recipe_imports_without_torch() -> None:
    """Building the recipe at ``reef serve`` start loads no training library."""
    check = (
        "import sys, recipes.registry, recipes.sao.recipe, recipes.sao.rollouts\n"
        "recipes.registry.build_recipe('sao', {})\n"
        "print(','.join(m for m in ('torch', 'transformers', 'peft') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == ""
