"""Run by ``tests/dev/test_forkserver.py`` as ``python -m tests.dev.fork_probe
[MODE]``: reports what a process started this way sees (one JSON line on stdout, a line on
stderr), then does ``MODE``: ``sleep`` (until signalled) or ``exitN`` (exit code N)."""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    line = sys.stdin.readline()
    print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(),
                      "argv": sys.argv, "value": os.environ.get("PROBE_VALUE"),
                      "path": sys.path[:2], "stdin": line.strip(), "name": __name__,
                      "pyarrow_loaded": "pyarrow" in sys.modules}), flush=True)
    print("probe on stderr", file=sys.stderr, flush=True)
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "sleep":
        time.sleep(120)
    if mode.startswith("exit"):
        sys.exit(int(mode[4:]))


if __name__ == "__main__":
    main()
