"""Copy the front-end libraries the pages use from node_modules/ into static/vendor/.

Run after ``npm ci`` (the Makefile does both). static/vendor/ is ignored by git: the libraries
come from npm at install time, pinned by package-lock.json, never from a CDN.

Each library is copied as a plain ES module with a ``.js`` name (served as JavaScript by any
static file server), with its source-map comment removed (the maps are not copied), and with its
licence beside it.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE_MODULES = ROOT / "node_modules"
VENDOR = ROOT / "static" / "vendor"
SOURCE_MAP_COMMENT = re.compile(r"^\s*//# sourceMappingURL=\S+\s*$", re.MULTILINE)


@dataclass(frozen=True)
class VendorFile:
    """One file of an npm package and the name it gets in static/vendor/."""

    package: str
    source: str
    target: str


FILES = (
    VendorFile("cytoscape", "dist/cytoscape.esm.min.mjs", "cytoscape.esm.js"),
    VendorFile("markdown-it", "dist/browser/markdown-it.esm.min.mjs", "markdown-it.esm.js"),
    VendorFile("dompurify", "dist/purify.es.mjs", "purify.esm.js"),
    # A classic script (it sets window.Chart): the ES build imports a package of its own.
    VendorFile("chart.js", "dist/chart.umd.min.js", "chart.umd.js"),
)


def copy_vendor(*, node_modules: Path = NODE_MODULES, vendor: Path = VENDOR) -> list[Path]:
    """Copy every file of FILES (and each package's licence); return the paths written."""
    vendor.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for item in FILES:
        package_dir = node_modules / item.package
        source = package_dir / item.source
        if not source.is_file():
            raise SystemExit(f"{source} is missing: run `npm ci` first.")
        text = SOURCE_MAP_COMMENT.sub("", source.read_text(encoding="utf-8"))
        target = vendor / item.target
        target.write_text(text, encoding="utf-8")
        written.append(target)
        version = json.loads((package_dir / "package.json").read_text(encoding="utf-8"))["version"]
        for licence in sorted(package_dir.glob("LICENSE*")):
            licence_target = vendor / f"{item.package}-{version}.{licence.name}"
            shutil.copyfile(licence, licence_target)
            written.append(licence_target)
    return written


def main() -> int:
    for path in copy_vendor():
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
