"""Real `ferry serve` processes for the client's tests: a pair that trusts each other, with a
vault on the first. The binary is `FERRY_BIN`, else the workspace's test build of the gateway
(`target/debug/ferry-under-test`, which has the fault points the outcome_unknown test uses;
`cargo build -p ferry-tests --bins` makes it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
START_BOUND_S = 30.0


def ferry_bin() -> str:
    path = os.environ.get("FERRY_BIN") or str(REPO / "target" / "debug" / "ferry-under-test")
    if not Path(path).is_file():
        raise RuntimeError(
            f"no gateway binary at {path}: run `cargo build -p ferry-tests --bins` (or set FERRY_BIN)"
        )
    return path


class Gateway:
    def __init__(self, label: str, env: dict | None = None):
        self.label = label
        self._dir = tempfile.mkdtemp(prefix=f"ferry-py-{label}-")
        self.home = Path(self._dir) / "home"
        self.log_path = Path(self._dir) / "log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [ferry_bin(), "--home", str(self.home), "serve", "--api", "127.0.0.1:0",
                 "--listen", "127.0.0.1:0", "--no-mdns", "--label", label],
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
            )
        started = time.monotonic()
        while not (self.home / "api.addr").exists():
            if self.process.poll() is not None or time.monotonic() - started > START_BOUND_S:
                raise RuntimeError(f"gateway {label} did not start:\n{self.log_path.read_text()}")
            time.sleep(0.02)
        status = json.loads(self.cli("--json", "status"))
        self.node_id = status["node_id"]
        self.quic = status["addresses"][0]

    def cli(self, *args: str) -> str:
        out = subprocess.run([ferry_bin(), "--home", str(self.home), *args], capture_output=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"ferry {' '.join(args)}: {out.stderr.decode()}")
        return out.stdout.decode()

    def trust_each_other(self, other: "Gateway") -> None:
        for me, them in ((self, other), (other, self)):
            me.cli("trust", them.node_id, "--label", them.label, "--addr", them.quic)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


def pair_with_notes(owner_env: dict | None = None) -> tuple[Gateway, Gateway]:
    """`a` owns vault `notes`; `b` trusts it (and is trusted)."""
    a = Gateway("a", owner_env)
    b = Gateway("b")
    a.trust_each_other(b)
    a.cli("vault", "create", "notes")
    return a, b
