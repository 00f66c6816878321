"""The ``orderedstream`` command as a script for spark-submit, which runs a Python file.

Run as a file (what spark-submit does), its arguments are the CLI's: ``run ...`` is
``orderedstream run ...`` in spark-submit's session, configured by spark-submit alone (a plain
``SparkSession``, none of the embedded session's tuning; ``orderedstream.app.run_cli``).
``python -m orderedstream.app.submit`` prints the file's path. On a standalone cluster::

    spark-submit --master spark://HOST:7077 \\
      --conf spark.pyspark.python="$(which python)" \\
      --jars "$(orderedstream shim-jar)" \\
      "$(python -m orderedstream.app.submit)" run \\
      --bootstrap-servers KAFKA:9092 --topic-pattern 'sessions-.*' \\
      --output s3://bucket/output --state s3://bucket/state \\
      --checkpoint /shared/checkpoint --s3-endpoint http://S3:8333

The pack must be installed where the executors' Python runs (``spark.pyspark.python``).
``--jars`` is optional (the shim's sticky placement of state partitions; without it Spark
places them). S3 credentials come from the standard AWS chain of the driver and the executors
(e.g. ``--conf spark.executorEnv.AWS_ACCESS_KEY_ID=...`` or an instance role). The process
tuning stays off unless given (``orderedstream.core.tuning``: the driver's environment and
``--conf spark.executorEnv.ORDEREDSTREAM_PROCESS_TUNING=1``).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """As a file: the CLI with ``argv``; as ``python -m``: print this file's path.

    Parameters
    ----------
    argv
        The CLI's arguments; None: ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit status (``orderedstream.app.cli.main``'s; 0 after printing the path)."""
    if __spec__ is not None and __name__ == "__main__":  # python -m orderedstream.app.submit
        print(Path(__file__).resolve())
        return 0
    here = str(Path(__file__).resolve().parent)
    # Python put this file's folder first on the path: its modules are not top-level ones
    sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != here]
    from orderedstream.app.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
