"""`geryon native build`: compile the rendezvous extension into its cache now (else: on first use)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from geryon.progress import Progress


def register(sub: Any) -> None:
    p = sub.add_parser(
        "native",
        help="the native TensorFlow extension (the grpc+geryon protocol)",
        description="Builds the native rendezvous extension against the installed TensorFlow.",
    )
    verbs = p.add_subparsers(dest="native_command", metavar="VERB", required=True)
    b = verbs.add_parser(
        "build",
        help="compile native/rendezvous into the cache (GERYON_NATIVE_CACHE, default ~/.cache/geryon/native)",
        description="Compiles native/rendezvous/*.cc against the installed TensorFlow, unless the cache "
        "already holds a library for this TensorFlow version and these sources. Prints the library path.",
    )
    b.add_argument("--force", action="store_true", help="rebuild even if the cache has the library")
    b.add_argument("--cache-dir", type=Path, help="cache directory (overrides GERYON_NATIVE_CACHE)")
    b.add_argument("--json", action="store_true", help="print the build's facts as JSON")
    b.add_argument(
        "--sanitizer",
        choices=["address", "thread"],
        help="build the AddressSanitizer or ThreadSanitizer variant (its own cache entry; "
        "native/rendezvous/README.md, Sanitizers, says how to load it)",
    )
    b.set_defaults(run=run_build)


def run_build(args: argparse.Namespace) -> int:
    from geryon.tf.build import BUILD_INFO, build

    path = build(
        cache_dir=args.cache_dir,
        force=args.force,
        progress=Progress("geryon native"),
        sanitizer=getattr(args, "sanitizer", None),
    )
    if args.json:
        info = json.loads((path.parent / BUILD_INFO).read_text())
        print(json.dumps({"library": str(path), **info}, indent=1))
    else:
        print(path)
    return 0
