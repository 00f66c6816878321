"""Development support: local services (Kafka, SeaweedFS S3, Spark) and the JVM shim's build.

Used by the demo, the chaos suite, the tests and the benchmarks; imported by no library module.
"""
