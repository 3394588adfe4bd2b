"""docs/firmware.md's measured section (`make firmware-doc`, evals/benchmarks/firmware_doc.py) is current:
every natmod size and firmware flash row that can be recomputed here equals the build's, the
others are well formed, and the heap table covers every example folder with existing device
scripts. Also the generator's map reading against an independent count (the ELF's symbols)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from evals.benchmarks import firmware_doc as fd
from support.harness import ROOT


def test_generated_section_is_current() -> None:
    text = fd.DOC.read_text()
    assert text.count(fd.BEGIN) == 1 and text.count(fd.END) == 1
    problems = fd.check(text)
    assert not problems, "\n".join(problems) + "\nrun `make firmware-doc`"
    # what `make natmod-all` builds is measured, not "not built"
    _, section, _ = fd.read_section(text)
    for arch, size in fd.natmod_sizes().items():
        if size is not None:
            assert f"| {arch} | {size} |" in section


def test_check_sees_a_stale_row() -> None:
    text = fd.DOC.read_text()
    sizes = {a: n for a, n in fd.natmod_sizes().items() if n is not None}
    assert sizes, "make natmod-all first"
    arch, n = next(iter(sizes.items()))
    stale = text.replace(f"| {arch} | {n} |", f"| {arch} | {n + 4} |", 1)
    assert any("stale" in p for p in fd.check(stale))


def test_help() -> None:
    env = {"PYTHONPATH": f"{ROOT / 'tools'}:{ROOT}", "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-m", "evals.benchmarks.firmware_doc", "--help"], capture_output=True,
                       text=True, cwd=ROOT, check=False, env=env)
    assert p.returncode == 0 and "--check" in p.stdout and "firmware.md" in p.stdout, p.stderr


def test_map_reading_equals_the_symbol_sizes() -> None:
    """The user C module's code as read from the link map equals the sizes nm gives its functions
    (symbols defined in the module's objects, kept in the image)."""
    built = [b for b in fd.BUILDS if (ROOT / b.folder / "firmware.map").is_file()]
    if not built:
        pytest.skip("no firmware with microtrain built in here (make -C ports/qemu BOARD=m7 BUILTIN=1)")
    for b in built:
        d = (ROOT / b.folder).resolve()
        got = fd.map_flash((d / "firmware.map").read_text(errors="replace"), d)
        # the module's functions: the global and static text symbols of its objects, by name
        names: set[str] = set()
        for obj in (d / "microtrain").glob("*.o"):
            nm = subprocess.run(["nm", "--defined-only", str(obj)], capture_output=True, text=True,
                                check=True)
            names |= {ln.split()[-1] for ln in nm.stdout.splitlines() if ln.split()[-2] in ("T", "t")}
        nm = subprocess.run(["nm", "-S", "--defined-only", str(d / "firmware.elf")], capture_output=True,
                            text=True, check=True)
        code = 0
        seen: set[str] = set()
        for ln in nm.stdout.splitlines():
            parts = ln.split()
            if len(parts) == 4 and parts[2] in ("T", "t") and parts[3] in names and parts[3] not in seen:
                seen.add(parts[3])
                code += int(parts[1], 16)
        # section padding for alignment is in the map's sizes, not in the symbols'
        print(b.name, "nm", code, "map", got["code"])
        assert code <= got["code"] <= code * 1.02 + 64, (b.name, code, got)
