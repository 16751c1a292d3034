"""The distribution installs only the ``argosy`` namespace, and lists every package folder."""
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_listed():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(conf["packages"])
    found = {"argosy"}
    for top in ("shared", "services"):
        for init in (ROOT / top).rglob("__init__.py"):
            found.add("argosy." + ".".join(init.parent.relative_to(ROOT).parts))
    assert found == listed, f"pyproject packages out of date: missing {found - listed}, stale {listed - found}"
    assert all(name == "argosy" or name.startswith("argosy.") for name in listed)


def test_import_argosy_namespace():
    import argosy
    import argosy.shared.wire
    assert argosy.__version__
    assert Path(argosy.shared.wire.__file__).parent == ROOT / "shared"
