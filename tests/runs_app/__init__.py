"""Tests of runs_app, and a helper for tests that import throwaway modules."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path
from types import ModuleType


class TempModules:
    """Write modules under ``root`` and import them; ``close()`` forgets them again."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._tops: set[str] = set()
        sys.path.insert(0, str(root))

    def write(self, dotted: str, source: str) -> Path:
        """Write module ``dotted`` (creating its packages) from dedented ``source``."""
        parts = dotted.split(".")
        self._tops.add(parts[0])
        directory = self.root
        for package in parts[:-1]:
            directory = directory / package
            directory.mkdir(exist_ok=True)
            (directory / "__init__.py").touch()
        path = directory / f"{parts[-1]}.py"
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        importlib.invalidate_caches()
        return path

    def load(self, dotted: str) -> ModuleType:
        return importlib.import_module(dotted)

    def close(self) -> None:
        for name in list(sys.modules):
            if name.partition(".")[0] in self._tops:
                del sys.modules[name]
        if str(self.root) in sys.path:
            sys.path.remove(str(self.root))
        importlib.invalidate_caches()
