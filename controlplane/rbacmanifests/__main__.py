"""``python -m controlplane.rbacmanifests render DIR [--check]`` and ``... check PATH...``.

``render`` writes ``manifests/rbac/`` (``--check``: only compare); ``check`` runs the RBAC check
over the given manifest files or folders and exits 1 with one line per finding.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from controlplane.manifestfiles import write_or_check
from controlplane.rbacmanifests.check import check, load_documents
from controlplane.rbacmanifests.render import rendered_files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m controlplane.rbacmanifests")
    commands = parser.add_subparsers(dest="command", required=True)
    render = commands.add_parser("render", help="write manifests/rbac from the declared rules")
    render.add_argument("directory", type=Path)
    render.add_argument("--check", action="store_true", help="compare instead of writing")
    verify = commands.add_parser("check", help="check RBAC manifests against the declared rules")
    verify.add_argument("paths", type=Path, nargs="+")
    args = parser.parse_args(argv)

    if args.command == "render":
        return write_or_check(args.directory, rendered_files(), args.check)

    missing = [str(path) for path in args.paths if not path.exists()]
    if missing:
        print(f"no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    findings = check(load_documents(args.paths))
    for finding in findings:
        print(f"check-rbac: {finding}", file=sys.stderr)
    if findings:
        return 1
    print(f"check-rbac: RBAC in {', '.join(map(str, args.paths))} is enough and no more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
