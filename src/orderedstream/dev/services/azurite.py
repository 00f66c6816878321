"""A real Azure Blob Storage endpoint: Azurite (the Azure Storage emulator, from npm) on
loopback, its blob service only.

Azurite honours ``If-None-Match: *`` and ``If-Match: <etag>`` on blob uploads, the two
conditional writes the pack's commit protocol needs. ``ensure_installed`` installs the pinned
npm package into ``~/.cache/orderedstream/azurite-<version>`` (``scripts/bootstrap.sh`` calls
it; it needs ``node`` and ``npm`` on PATH).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from orderedstream.core.errors import ServiceError
from orderedstream.core.storage import azure_endpoint_options
from orderedstream.dev.services.cache import cache_root
from orderedstream.dev.services.process import ManagedProcess, free_port, wait_until

AZURITE_VERSION = "3.37.0"
#: Azurite's well-known development account (public, in Microsoft's documentation).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")


def install_dir() -> Path:
    """The folder the pinned Azurite version is (or will be) installed into, in the pack's
    cache folder."""
    return cache_root() / f"azurite-{AZURITE_VERSION}"


def ensure_installed() -> Path:
    """The ``azurite-blob`` launcher, installed from npm the first time (once per version)."""
    launcher = install_dir() / "node_modules" / ".bin" / "azurite-blob"
    if launcher.exists():
        return launcher
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise ServiceError("Azurite needs Node.js: install node and npm (Debian: apt-get "
                           "install nodejs npm), then run scripts/bootstrap.sh again")
    install_dir().mkdir(parents=True, exist_ok=True)
    done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix",
                           str(install_dir()), f"azurite@{AZURITE_VERSION}"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0 or not launcher.exists():
        raise ServiceError(f"npm install azurite@{AZURITE_VERSION} failed: "
                           f"{(done.stderr or done.stdout)[-2000:]}")
    return launcher


class AzuriteServer:
    """Azurite's blob service with one container."""

    def __init__(self, workdir: Path, container: str = "lake") -> None:
        self.workdir = Path(workdir)
        self.container = container
        self.port = free_port()
        self.log_path = self.workdir / "azurite.log"
        self._proc: ManagedProcess | None = None

    @property
    def endpoint(self) -> str:
        """The blob endpoint (path-style: account in the path)."""
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def storage_options(self) -> dict[str, Any]:
        """The pack's ``storage_options`` for ``az://`` URLs here (no credentials:
        ``azure_env`` gives them)."""
        return azure_endpoint_options(self.endpoint)

    def azure_env(self) -> dict[str, str]:
        """The standard Azure variables that let a process reach this server."""
        return {"AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT, "AZURE_STORAGE_ACCOUNT_KEY": ACCOUNT_KEY}

    def url(self, *parts: str) -> str:
        """An ``az://`` URL under this server's container.

        Parameters
        ----------
        *parts
            Path parts, joined with ``/`` (their own leading and trailing ``/`` dropped,
            empty ones skipped).

        Returns
        -------
        str
            ``az://<container>/<part>/<part>...``."""
        return "az://" + "/".join([self.container, *[p.strip("/") for p in parts if p]])

    def filesystem(self) -> Any:
        """A fresh (uncached) adlfs filesystem for this server, with the account's key."""
        from adlfs import AzureBlobFileSystem

        return AzureBlobFileSystem(connection_string=(
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.endpoint};"), skip_instance_cache=True)

    def start(self, timeout: float = 60.0) -> AzuriteServer:
        """Install Azurite if needed, start its blob service and wait for the container
        (created if missing).

        Parameters
        ----------
        timeout
            Seconds the server has to answer.

        Returns
        -------
        AzuriteServer
            This server, running.

        Raises
        ------
        ServiceError
            Node.js is missing or the npm install failed, or the server exited or did not
            answer within ``timeout``."""
        launcher = ensure_installed()
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [str(launcher), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                "--location", str(self.workdir / "data"), "--skipApiVersionCheck", "--loose",
                ]
        self._proc = ManagedProcess("azurite", argv, self.log_path, cwd=self.workdir).start()
        wait_until(self._ready, timeout, f"Azurite on {self.endpoint}", self.log_path,
                   self._proc)
        return self

    def _ready(self) -> bool:
        fs = self.filesystem()
        if not fs.exists(self.container):
            fs.mkdir(self.container)
        return bool(fs.exists(self.container))

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


def main() -> None:
    """``python -m orderedstream.dev.services.azurite``: install Azurite, print its launcher.

    Raises
    ------
    ServiceError
        Node.js is missing or the npm install failed."""
    print(ensure_installed())


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
