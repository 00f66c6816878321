"""``orderedstream``: the pack's command line (demo / main job on embedded defaults)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path


def _demo(args: argparse.Namespace) -> int:
    from orderedstream.services.embedded import embedded_services
    from orderedstream.services.spark import local_spark_session
    from orderedstream.smoke import run_smoke

    began = time.monotonic()
    with embedded_services(args.bootstrap_servers, args.s3_endpoint, args.workdir) as endpoints:
        for line in endpoints.started:
            print(f"started {line}")
        spark = local_spark_session("orderedstream-demo", master=args.master,
                                    tmp_dir=endpoints.workdir / "spark")
        spark.sparkContext.setLogLevel("WARN")
        try:
            summary = run_smoke(endpoints, spark, records=args.records)
        finally:
            spark.stop()
    print(f"demo OK in {time.monotonic() - began:.0f}s: {summary}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="orderedstream", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run the pipeline on embedded (or given) services")
    demo.add_argument("--bootstrap-servers", help="external Kafka; default: start a local broker")
    demo.add_argument("--s3-endpoint", help="external S3 endpoint; default: start SeaweedFS")
    demo.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    demo.add_argument("--workdir", type=Path, help="where local services keep data and logs")
    demo.add_argument("--records", type=int, default=30000, help="records to generate")
    demo.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
