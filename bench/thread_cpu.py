"""CPU seconds of each thread of one export, sampled from ``/proc/self/task`` in-process.

    .venv/bin/python bench/thread_cpu.py sqlite:////tmp/egress-bench/events-5000000-v2.db \
        parquet zstd /tmp/out
    PYTHONPATH=/path/to/other/checkout/src .venv/bin/python bench/thread_cpu.py …  # A/B

Runs ``egress.export`` of the ``events`` table (the bench table, bench/data.py) into a
new directory and prints the wall time, the process CPU and each thread's CPU, threads
of one kind added up (``egress-read``: the read-ahead, the driver's rows and the casts;
``MainThread``: start-up, then encoding; ``egress-commit``: storing parts and
checkpoints; ``egress-sha256``: the local sink's hash). The busiest thread after
start-up is an export's critical path; the sum over two cores is its floor. Prints
figures; not a test.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time

STARTED = time.perf_counter()
CPU_STARTED = time.process_time()

from egress.memory import use_system_allocator  # noqa: E402 - timed from the first line

use_system_allocator()
import egress  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def sample(seen: dict[str, tuple[str, float, float]], stop: threading.Event) -> None:
    """Keep each thread's last CPU reading and its seconds spent runnable but waiting
    for a CPU (``schedstat``; a thread that ends keeps its last ones)."""
    while True:
        names = {str(t.native_id): t.name for t in threading.enumerate()}
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/self/task/{tid}/comm") as f:
                    comm = f.read().strip()
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    waited = int(f.read().split()[1]) / 1e9
            except OSError:
                continue  # ended meanwhile
            name = names.get(tid) or seen.get(tid, (comm, 0.0, 0.0))[0]
            seen[tid] = (name, (int(fields[11]) + int(fields[12])) / TICK, waited)
        if stop.wait(0.05):
            return


def kind(name: str) -> str:
    """``egress-commit_0`` → ``egress-commit``: threads of one pool together."""
    if name.startswith("egress-"):
        return "-".join(name.split("-")[:2]).split("_")[0]
    return name


def main() -> None:
    url, fmt, compression, out = sys.argv[1:5]  # fmt ``csvpg``: the postgres CSV dialect
    shutil.rmtree(out, ignore_errors=True)
    seen: dict[str, tuple[str, float, float]] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(seen, stop), name="sampler", daemon=True)
    sampler.start()
    options = {"csv_dialect": "postgres"} if fmt == "csvpg" else {}
    egress.export(url, ["events"], to=out, format="csv" if fmt == "csvpg" else fmt,
                  compression=None if compression == "-" else compression, options=options)
    stop.set()
    sampler.join()
    totals: dict[str, tuple[float, float]] = {}
    for name, cpu, waited in seen.values():
        was = totals.get(kind(name), (0.0, 0.0))
        totals[kind(name)] = (was[0] + cpu, was[1] + waited)
    busiest = sorted(totals.items(), key=lambda item: -item[1][0])
    print(f"wall {time.perf_counter() - STARTED:.2f} s, CPU "
          f"{time.process_time() - CPU_STARTED:.2f} s: "
          + ", ".join(f"{name} {cpu:.2f}" for name, (cpu, _) in busiest if cpu >= 0.005))
    # runnable, no CPU free: what the critical path lost to the other threads
    print("waited for a CPU: " + ", ".join(
        f"{name} {waited:.2f}" for name, (cpu, waited) in busiest if cpu >= 0.005))
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
