"""``orderedstream run --remote sc://HOST:PORT``: the main job through Spark Connect, to the
end of its input (``--available-now``), checked against the topics (nothing lost, duplicated
or out of order); ``--remote`` with ``--master`` is refused."""

from __future__ import annotations

from pathlib import Path

from orderedstream.app.job.demo import verify_output
from orderedstream.app.job.generator import GeneratorOptions, generate
from orderedstream.app.job.pipeline import JobOptions, make_processor
from orderedstream.sinks.deltalog import table_format
from tests.app.cli_helpers import run_cli
from tests.fixtures import unique


def test_run_remote_runs_the_main_job_through_connect(connect_server, kafka, s3,
                                                      tmp_path: Path) -> None:
    prefix = unique("cxrun")
    gen = GeneratorOptions(prefix=prefix, sites=1, late_sites=0, partitions=2,
                           sessions_per_site=4, rows=3, updates=10, bad_fraction=0.0, seed=5)
    generated = generate(kafka.bootstrap, gen, create_topic=kafka.create_topic)
    output, state = str(tmp_path / "out"), s3.url(unique("cxstate"), "state")
    checkpoint = str(tmp_path / "ckpt")
    args = ["run", "--bootstrap-servers", kafka.bootstrap, "--output", output,
            "--state", state, "--checkpoint", checkpoint, "--topic-pattern", f"{prefix}-.*",
            "--s3-endpoint", s3.endpoint, "--available-now", "--max-offsets-per-trigger", "40",
            "--log-file", str(tmp_path / "run.log"), "--remote", connect_server.url]
    done = run_cli(*args, env=s3.aws_env())
    assert done.returncode == 0, done.stdout[-4000:]
    assert f"[job] starting Spark session ({connect_server.url})" in done.stdout
    assert table_format(output, s3.storage_options) == "delta"
    opts = JobOptions(bootstrap=kafka.bootstrap, output=output, state_location=state,
                      checkpoint=checkpoint, topic_pattern=f"{prefix}-.*",
                      storage_options=s3.storage_options)
    processor = make_processor(opts)
    verdict = verify_output(processor, opts)
    assert verdict.checked == verdict.expected_changes > 0
    assert (verdict.lost, verdict.duplicated, verdict.out_of_order,
            verdict.wrong_final_tables) == (0, 0, 0, 0), verdict.examples
    assert generated.records == verdict.expected_changes
    batches = len(list(processor.log.records()))
    assert batches >= 2  # several batches, each committed once
    # the figures come from Spark's progress (the batch function ran on the server)
    assert (f"[job] stopped: {batches} batches committed in this run, "
            f"{generated.records:,} records") in done.stdout, done.stdout[-2000:]
    # placement needs the driver's JVM: one line, no failure
    assert done.stdout.count("Spark Connect session: each batch is placed by Spark") == 1


def test_run_refuses_remote_with_master(tmp_path: Path) -> None:
    done = run_cli("run", "--bootstrap-servers", "localhost:9", "--output", str(tmp_path / "o"),
                   "--state", str(tmp_path / "s"), "--checkpoint", str(tmp_path / "c"),
                   "--master", "local[2]", "--remote", "sc://localhost:15002")
    assert done.returncode == 2
    assert "argument --remote: not allowed with argument --master" in done.stdout
    bad = run_cli("run", "--bootstrap-servers", "localhost:9", "--output", str(tmp_path / "o"),
                  "--state", str(tmp_path / "s"), "--checkpoint", str(tmp_path / "c"),
                  "--remote", "localhost:15002")
    assert bad.returncode == 2 and "is not a Spark Connect URL: sc://HOST:PORT" in bad.stdout
