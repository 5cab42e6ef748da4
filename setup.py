"""Ships the native extension's C++ sources inside the package (geryon/_native/), so that an install
from the wheel can run `geryon native build` without a checkout (geryon/tf/build.py looks for the
checkout's native/ first, then for these).

The repository keeps them in native/ (beside geryon/, where they are edited); MANIFEST.in puts that
folder in the sdist, and this build_py copies its sources into the built package. An editable install
copies nothing: build.py then finds the checkout's native/ and picks edits up.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# native/<folder> -> the files the build (and the sanitizer runs) need; the tree keeps its layout.
NATIVE = {"rendezvous": ("*.cc", "*.h"), "test_device": ("*.cc", "*.h"), "sanitizers": ("*.supp",)}
PACKAGED = Path("geryon", "_native")


class BuildPyWithNative(build_py):
    def _native_files(self) -> list[tuple[Path, Path]]:
        root = Path(__file__).resolve().parent / "native"
        pairs = []
        for folder, patterns in NATIVE.items():
            for pattern in patterns:
                for source in sorted((root / folder).glob(pattern)):
                    pairs.append((source, Path(self.build_lib, PACKAGED, folder, source.name)))
        if not any(s.suffix == ".cc" and s.parent.name == "rendezvous" for s, _ in pairs):
            raise SystemExit(f"no C++ sources in {root / 'rendezvous'}: a package without them cannot build")
        return pairs

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for source, target in self._native_files():
            self.mkpath(str(target.parent))
            self.copy_file(str(source), str(target), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs
        return [*outputs, *(str(target) for _, target in self._native_files())]


setup(cmdclass={"build_py": BuildPyWithNative})
