"""The peak RSS of a test's child process, as the child itself reports it.

``ru_maxrss`` is no good for that: Linux keeps it through ``fork`` and ``exec``, so a
child started by a pytest process that once held 900 MB reports 900 MB. ``VmHWM`` in
``/proc/self/status`` belongs to the program's own memory map, made new by ``exec``.
"""

#: A Python expression, for the scripts tests run in a child: its peak RSS in MiB.
PEAK_MIB_EXPRESSION = (
    "int(next(line for line in open('/proc/self/status') "
    "if line.startswith('VmHWM:')).split()[1]) / 1024"
)
