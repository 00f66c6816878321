"""One module per comparison; each exposes ``run(ctx) -> list[Result]`` (see benchmarks.common)."""
