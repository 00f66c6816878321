"""Bad input to ``orderedstream run`` / ``demo``: the pack's sentence first (within the first
300 characters of what the user sees), before Spark starts where it can be checked then."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.cli_helpers import assert_reason_first, run_cli
from tests.fixtures import unique


def _run_args(kafka: str, tmp_path: Path, **override: str) -> list[str]:
    args = {"--bootstrap-servers": kafka, "--output": str(tmp_path / "out"),
            "--state": str(tmp_path / "state"), "--checkpoint": str(tmp_path / "ckpt"),
            "--topic-pattern": unique("nothing") + "-.*", **override}
    return [item for pair in args.items() for item in pair]


def test_zero_max_offsets_is_refused_with_the_reason_first(tmp_path: Path) -> None:
    result = run_cli("run", *_run_args("127.0.0.1:9", tmp_path),
                     "--max-offsets-per-trigger", "0", "--available-now")
    assert_reason_first(result, "--max-offsets-per-trigger", "must be > 0", "'none'")
    assert not (tmp_path / "ckpt").exists()


def test_bad_trigger_is_an_option_error_before_spark(kafka, tmp_path: Path) -> None:
    result = run_cli("run", *_run_args(kafka.bootstrap, tmp_path, **{"--trigger": "soon"}))
    assert_reason_first(result, "OptionError", "--trigger", "'soon'")
    assert "Spark" not in result.stdout.split("\n")[0]


def test_bad_topic_pattern_is_an_option_error(kafka, tmp_path: Path) -> None:
    result = run_cli("run", *_run_args(kafka.bootstrap, tmp_path, **{"--topic-pattern": "(x"}))
    assert_reason_first(result, "OptionError", "--topic-pattern", "regular expression")


def test_unreachable_kafka_names_the_servers(tmp_path: Path) -> None:
    result = run_cli("run", *_run_args("127.0.0.1:9", tmp_path), timeout=120)
    assert_reason_first(result, "KafkaUnavailableError", "127.0.0.1:9")


def test_state_in_a_missing_bucket_names_the_url_before_any_record(kafka, s3, tmp_path: Path,
                                                                     ) -> None:
    state = f"s3://{unique('no-such-bucket')}/state"
    result = run_cli("run", *_run_args(kafka.bootstrap, tmp_path, **{"--state": state}),
                     "--s3-endpoint", s3.endpoint, env=s3.aws_env(), timeout=120)
    assert_reason_first(result, "LocationError", state, "bucket")
    assert not (tmp_path / "ckpt").exists()  # refused before the query started


def test_output_in_a_missing_bucket_names_the_url(kafka, s3, tmp_path: Path) -> None:
    output = f"s3://{unique('missing')}/tables/out"
    result = run_cli("run", *_run_args(kafka.bootstrap, tmp_path, **{"--output": output}),
                     "--s3-endpoint", s3.endpoint, env=s3.aws_env(), timeout=120)
    assert_reason_first(result, "LocationError", output)


def test_denied_credentials_name_the_url(kafka, s3, tmp_path: Path) -> None:
    # No credentials at all for an S3 endpoint that needs none is allowed; a local path that
    # cannot be created (a file in the way) is the portable "denied" case.
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    checkpoint = str(blocker / "ckpt")
    result = run_cli("run", *_run_args(kafka.bootstrap, tmp_path,
                                       **{"--checkpoint": checkpoint}), timeout=120)
    assert_reason_first(result, "LocationError", checkpoint)


def test_demo_refuses_a_folder_that_is_not_its_own(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    result = run_cli("demo", "--workdir", str(tmp_path), "--clean")
    assert_reason_first(result, "OptionError", "--clean refuses", str(tmp_path))
    assert (tmp_path / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize(("option", "value", "accepted"), [
    ("--sites", "0", "1 or more sites"), ("--partitions", "0", "1 or more partitions"),
    ("--sessions", "-2", "1 or more sessions"), ("--rows", "-1", "0 or more rows"),
    ("--updates", "-1", "0 or more row changes"), ("--sites", "many", "1 or more"),
    ("--max-offsets-per-trigger", "0", "1 or more records"),
    ("--progress-every", "0", "seconds > 0")])
def test_demo_refuses_bad_counts_before_starting_anything(tmp_path: Path, option: str,
                                                          value: str, accepted: str) -> None:
    workdir = tmp_path / "demo"
    result = run_cli("demo", "--workdir", str(workdir), option, value, timeout=60)
    assert result.returncode == 2, result.stdout[-3000:]
    assert_reason_first(result, "orderedstream demo: error:", f"argument {option}", accepted)
    assert "usage: orderedstream demo" in result.stdout
    assert "Traceback" not in result.stdout and "[demo]" not in result.stdout
    assert not workdir.exists()  # nothing started, nothing written


def test_demo_help_gives_progress_every_its_unit_and_default() -> None:
    result = run_cli("demo", "--help", timeout=60)
    assert result.returncode == 0, result.stdout
    text = " ".join(result.stdout.split())  # argparse wraps the help text
    assert "--progress-every" in text
    assert "(seconds, > 0; default: 10)" in text


def test_unknown_option_shows_the_subcommands_usage(tmp_path: Path) -> None:
    result = run_cli("demo", "--workdir", str(tmp_path / "demo"), "--no-such-option", "5",
                     timeout=60)
    assert_reason_first(result, "orderedstream demo: error: unrecognized arguments: "
                                "--no-such-option 5")
    assert "usage: orderedstream demo" in result.stdout
    nested = run_cli("sink", "files", "some-url", "--bogus", timeout=60)
    assert_reason_first(nested, "orderedstream sink files: error: unrecognized arguments: "
                                "--bogus")
    assert "usage: orderedstream sink files" in nested.stdout


@pytest.mark.parametrize("present,fmt", [("_delta_log", "parquet"), ("_fenced", "delta")])
def test_an_output_holding_the_other_format_is_refused_before_spark(
        kafka, tmp_path: Path, present: str, fmt: str) -> None:
    """A Delta table written into a fenced Parquet table's folder (or the reverse) made two
    logs blind to each other's files: a vacuum of one deleted the other's data."""
    output = tmp_path / "out"
    (output / present).mkdir(parents=True)
    (output / present / "00000000000000000000.json").write_text("{}")
    result = run_cli("run", *_run_args(kafka.bootstrap, tmp_path), "--output-format", fmt,
                     "--available-now", timeout=120)
    assert_reason_first(result, "OptionError", str(output), "holds a",
                        "Delta table" if fmt == "parquet" else "fenced Parquet table")
    assert result.returncode == 2
    checkpoint = tmp_path / "ckpt"  # made by the writability probe, empty: no query started
    assert not checkpoint.exists() or not any(checkpoint.iterdir())
    assert sorted(p.name for p in output.iterdir()) == [present]  # nothing written beside it
