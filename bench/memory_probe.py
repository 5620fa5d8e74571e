"""Where an export's peak RSS goes: sampled inside the exporting process.

    .venv/bin/python bench/memory_probe.py --rows 5000000 \
        --case csv --case "csv|MALLOC_ARENA_MAX=2" --case "parquet.zstd|TRIM_EVERY=0.5"
    .venv/bin/python bench/memory_probe.py --source sqlite --rows 5000000 --timeline \
        --case parquet.zstd --case "parquet.zstd|SLICE=1000"

Loads the ``events`` table into a throwaway PostgreSQL server (the tests' ``pgserver``),
or with ``--source sqlite`` uses bench/run.py's cached SQLite file (built if missing),
then runs each case, ``FORMAT[.COMPRESSION][|ENV=VALUE;ENV=VALUE]``, as one
``egress.export`` in a fresh process with the system allocator (as the CLI runs). A
thread there samples every 20 ms the RSS, Arrow's allocated bytes and glibc's
``mallinfo2`` (in use, free but held), and prints them at the peak; ``TRIM_EVERY=S``
calls ``malloc_trim(0)`` every S seconds; ``SLICE=S`` runs slices of S seconds (the
CLI's ``--slice-seconds``, default 5). ``--timeline`` prints, once a second,
``second:RSS/in use/held`` in MB. ``/usr/bin/time`` adds the CPU seconds.
Prints figures; not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r'''
import ctypes, os, sys, threading, time
import pyarrow as pa
import egress
from egress.memory import use_system_allocator

class MallInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo
use_system_allocator()
page = os.sysconf("SC_PAGE_SIZE")
peak, at_peak, stop = [0], [None], threading.Event()
timeline, started = [], time.monotonic()

def sample():
    second = 0
    while not stop.wait(0.02):
        rss = int(open("/proc/self/statm").read().split()[1]) * page
        if time.monotonic() - started >= second:
            mi = libc.mallinfo2()
            timeline.append(f"{second}:{rss / 1e6:.0f}/{(mi.uordblks + mi.hblkhd) / 1e6:.0f}"
                            f"/{mi.fordblks / 1e6:.0f}")
            second += 1
        if rss > peak[0]:
            mi = libc.mallinfo2()
            peak[0], at_peak[0] = rss, (pa.total_allocated_bytes(),
                                        mi.uordblks + mi.hblkhd, mi.fordblks)

def trim(every):
    while not stop.wait(every):
        libc.malloc_trim(0)

threading.Thread(target=sample, daemon=True).start()
if os.environ.get("TRIM_EVERY"):
    threading.Thread(target=trim, args=(float(os.environ["TRIM_EVERY"]),),
                     daemon=True).start()
url, fmt, out, compression = sys.argv[1:5]
started = time.monotonic()
egress.export(url, ["events"], to=out, format=fmt, compression=compression or None,
              slice_seconds=float(os.environ.get("SLICE", "5")))
stop.set()
arrow, used, held = at_peak[0] or (0, 0, 0)
print(f"{time.monotonic() - started:.1f} s, peak RSS {peak[0] / 1e6:.0f} MB; at the peak: "
      f"Arrow {arrow / 1e6:.0f} MB, malloc in use {used / 1e6:.0f} MB, "
      f"free but held {held / 1e6:.0f} MB", flush=True)
if os.environ.get("PROBE_TIMELINE"):
    print("  " + " ".join(timeline), flush=True)
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--case", action="append", default=[],
                        help="FORMAT[.COMPRESSION][|ENV=VALUE;…] (repeatable; default csv)")
    parser.add_argument("--source", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--timeline", action="store_true",
                        help="print second:RSS/in use/held (MB) once a second")
    args = parser.parse_args()
    sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]
    import data

    from pgserver import running_server  # the tests' throwaway server

    work = Path(tempfile.mkdtemp(prefix="egress-memory-"))
    child = work / "child.py"
    child.write_text(CHILD)
    try:
        with contextlib.ExitStack() as stack:
            if args.source == "sqlite":
                db = data.sqlite_db(Path(tempfile.gettempdir()) / "egress-bench", args.rows)
                url = f"sqlite:///{db}"
            else:
                pg = stack.enter_context(running_server())
                url = data.load_postgres(pg.url, "bench", args.rows)
            for case in args.case or ["csv"]:
                fmt, _, env_text = case.partition("|")
                name, _, compression = fmt.partition(".")
                env = dict(os.environ)
                if args.timeline:
                    env["PROBE_TIMELINE"] = "1"
                env.update(item.split("=", 1) for item in env_text.split(";") if item)
                out = work / "out"
                print(f"{case}: ", end="", flush=True)
                subprocess.run(["/usr/bin/time", "-f", "  %U s user + %S s system CPU",
                                sys.executable, str(child), url, name, str(out), compression],
                               env=env, check=False)
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
