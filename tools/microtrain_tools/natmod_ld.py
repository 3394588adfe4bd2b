"""The natmod's linker: MicroPython's mpy_ld.py after a garbage-collecting partial link.

    python -m microtrain_tools.natmod_ld MPY_LD_PY [mpy_ld.py's arguments]

The top-level Makefile passes this as MPY_LD to usermod/microtrain/Makefile. mpy_ld.py
keeps every section of every object it is given; the kernels are compiled one function per
section (-ffunction-sections -fdata-sections), so one ``ld -r --gc-sections`` from mpy_init
first drops what no function of the module table reaches: whatever a natmod built with
OPS=... leaves out (kernels, their checks and helpers), and the helpers no binding calls.
mpy_init stays first in .text (armv6m enters it with a short branch). ``--preprocess``
(the qstr scan) goes to mpy_ld.py unchanged.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# the binutils prefix of each arch whose natmod is linked this way (dynruntime.mk's CROSS); the
# others (xtensawin: its literal sections; rv32imc), not built here, go to mpy_ld.py as they are
CROSS = {"x64": "", "armv6m": "arm-none-eabi-", "armv7m": "arm-none-eabi-", "armv7emsp": "arm-none-eabi-",
         "armv7emdp": "arm-none-eabi-"}

# The partial link's layout: one section of each kind mpy_ld.py reads (each at address 0, as it
# expects of an object), mpy_init leading .text.
SCRIPT = """SECTIONS
{
  .text 0 : { *(.text.mpy_init) *(.text .text.*) }
  .rodata 0 : { *(.rodata .rodata.*) }
  .data.rel.ro 0 : { *(.data.rel.ro .data.rel.ro.*) }
  .bss 0 : { *(.bss .bss.* COMMON) }
}
"""


def main(argv: list[str]) -> int:
    mpy_ld, args = argv[0], argv[1:]
    cmd = [sys.executable, mpy_ld]
    arch = args[args.index("--arch") + 1] if "--arch" in args else ""
    if "--preprocess" in args or arch not in CROSS or "-o" not in args:
        return subprocess.call(cmd + args)
    out = Path(args[args.index("-o") + 1])
    objs = [a for a in args if a.endswith(".o")]
    rest = [a for a in args if not a.endswith(".o")]
    script = out.with_name("natmod_gc.ld")
    script.write_text(SCRIPT)
    merged = out.with_name("_microtrain_gc.elf")  # (not *.o: the sources' objects)
    ld = f"{CROSS[arch]}ld"
    rc = subprocess.call([ld, "-r", "--gc-sections", "-u", "mpy_init", "-T", str(script), "-o", str(merged),
                          *objs])
    if rc != 0:
        return rc
    return subprocess.call(cmd + rest + [str(merged)])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
