"""Every process that ended during a command, with its CPU, from Linux process accounting
(session 30: which short-lived processes the benchmark's 0.25 s samples missed).

``python3 pacct.py run FILE CMD...`` (root: ``acct(2)``) writes one record per process that
exits while CMD runs; ``python3 pacct.py show FILE [ROOT_PID]`` prints them (pid, parent,
lifetime, CPU, name), only ROOT_PID's descendants when given (orphans re-parented to pid 1 are
followed while their creation falls inside ROOT_PID's life). Records are ``struct acct_v3``
(``linux/acct.h``), times in 1/100 s.
"""

from __future__ import annotations

import ctypes
import struct
import subprocess
import sys
from typing import Any

_HEAD = struct.Struct("<BBHIIIIIIf")  # flag, version, tty, exit, uid, gid, pid, ppid, btime, etime
_RECORD = 64


def _comp(value: int) -> int:
    """``comp_t``: a 13-bit mantissa and a base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def read(path: str) -> list[dict[str, Any]]:
    with open(path, "rb") as handle:
        data = handle.read()
    out = []
    for i in range(0, len(data) - _RECORD + 1, _RECORD):
        rec = data[i:i + _RECORD]
        _, version, _, _, _, _, pid, ppid, btime, etime = _HEAD.unpack(rec[:_HEAD.size])
        if version != 3:
            raise ValueError(f"{path}: accounting record version {version}, not 3 (acct_v3)")
        utime, stime = struct.unpack("<HH", rec[32:36])
        out.append({"pid": pid, "ppid": ppid, "btime": btime, "life_s": etime / 100,
                    "cpu_s": (_comp(utime) + _comp(stime)) / 100,
                    "name": rec[48:64].split(b"\0")[0].decode(errors="replace")})
    return out


def descendants(records: list[dict[str, Any]], root: int) -> list[dict[str, Any]]:
    top = next(r for r in records if r["pid"] == root)
    span = (top["btime"], top["btime"] + top["life_s"])
    mine = {root}
    grown = True
    while grown:
        grown = False
        for r in records:
            orphan = r["ppid"] == 1 and span[0] <= r["btime"] <= span[1]
            if r["pid"] not in mine and (r["ppid"] in mine or orphan):
                mine.add(r["pid"])
                grown = True
    return [r for r in records if r["pid"] in mine]


def main(argv: list[str]) -> None:
    if argv[0] == "run":
        open(argv[1], "w").close()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.acct(argv[1].encode()) != 0:
            raise OSError(ctypes.get_errno(), "acct(2) refused (root only)")
        try:
            subprocess.run(argv[2:], check=False)
        finally:
            libc.acct(None)
        return
    records = read(argv[1])
    if len(argv) > 2:
        records = descendants(records, int(argv[2]))
    for r in sorted(records, key=lambda r: r["pid"]):
        print(f"{r['pid']:>7} {r['ppid']:>7} {r['life_s']:8.2f} s {r['cpu_s']:6.2f} CPU-s "
              f"{r['name']}")
    print(f"total {sum(r['cpu_s'] for r in records):.2f} CPU-s in {len(records)} processes; "
          f"lived under 1 s: {sum(r['cpu_s'] for r in records if r['life_s'] < 1):.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
