"""Every document the repository cites lives in the repository (no dangling references)."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / f for f in out.splitlines() if f.endswith((".md", ".py", ".toml", ".txt")) or f == "Makefile"]


def test_cited_markdown_files_exist():
    missing = []
    for path in _tracked():
        if not path.is_file():
            continue
        # Documents cited by folder: docs/, design/ (notes that once lived outside the repository), READMEs.
        for m in re.finditer(r"(?<![\w/.])((?:[\w.-]+/)*(?:docs|design)/[\w.-]+\.md|(?:[\w.-]+/)+README\.md)",
                             path.read_text(errors="replace")):
            cited = m.group(1)
            if not any(c.is_file() for c in (ROOT / cited, path.parent / cited)):
                missing.append(f"{path.relative_to(ROOT)} cites {cited}")
    assert not missing, "\n".join(missing)


def test_relative_markdown_links_resolve():
    broken = []
    for path in _tracked():
        if path.suffix != ".md" or not path.is_file():
            continue
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not broken, "\n".join(broken)
