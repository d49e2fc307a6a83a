"""Import every module of Reef's packages; print JSON: how many, and each module whose
import failed on a missing module (the missing module's name).

Run by tests/e2e/test_wheel_install.py with the interpreter of a fresh environment where
Reef's wheel is installed, so what is imported is the installed package, not a checkout.
"""

from __future__ import annotations

import importlib
import json
import pkgutil

PACKAGES = ("reef", "streams", "recipes", "trainers")


def main() -> None:
    count = 0
    missing: dict[str, str | None] = {}
    for top in PACKAGES:
        package = importlib.import_module(top)
        for info in pkgutil.walk_packages(package.__path__, f"{top}."):
            if info.name.rpartition(".")[2] == "__main__":
                continue  # runs the command line when imported
            count += 1
            try:
                importlib.import_module(info.name)
            except ModuleNotFoundError as exc:
                missing[info.name] = exc.name
    print(json.dumps({"imported": count, "missing": missing}))


if __name__ == "__main__":
    main()
