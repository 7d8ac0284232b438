"""A real PgBouncer (Debian's `pgbouncer` package) in front of a test server, started by the test.

It listens on 127.0.0.1 and reaches the server over its unix socket, where the server trusts
local connections; clients sign in to PgBouncer with a password it checks (scram-sha-256, against
its auth_file), the way a deployment's PgBouncer stands in front of PostgreSQL. Every database name
is passed through (`* = ...`), so a test reaches any database of the server by the same address.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

from psycopg.conninfo import conninfo_to_dict

from payrail_test_support.ports import unused_port

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
# The password every test login has at PgBouncer (the server behind it asks none on its socket).
PASSWORD = "pooler-test-password-7f3a"


@dataclass
class PgBouncer:
    """A running PgBouncer; url() gives a client's connection string through it."""

    directory: Path
    port: int
    process: subprocess.Popen
    users: set[str] = field(default_factory=set)

    def url(self, database: str, user: str = "postgres") -> str:
        return f"postgresql://{quote(user)}:{quote(PASSWORD)}@127.0.0.1:{self.port}/{quote(database)}"

    def through(self, server_url: str, user: str = "postgres") -> str:
        """The pooled equivalent of server_url (same database), as user."""
        return self.url(urlsplit(server_url).path.lstrip("/"), user)

    def allow(self, *users: str) -> None:
        """Lets users sign in (with PASSWORD); PgBouncer rereads its auth_file on SIGHUP."""
        self.users.update(users)
        _write_auth_file(self.directory, self.users)
        self.process.send_signal(signal.SIGHUP)
        time.sleep(0.2)

    @property
    def log(self) -> str:
        return (self.directory / "pgbouncer.log").read_text(errors="replace")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)  # immediate shutdown
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def version() -> tuple[int, ...]:
    """PgBouncer's version, from `pgbouncer --version` ("PgBouncer 1.18.0")."""
    first = subprocess.run([PGBOUNCER, "--version"], capture_output=True, text=True, check=True).stdout.split("\n", 1)[0]
    return tuple(int(part) for part in first.split()[1].split("."))


def _write_auth_file(directory: Path, users: set[str]) -> None:
    lines = "".join(f'"{user}" "{PASSWORD}"\n' for user in sorted(users))
    path = directory / "userlist.txt"
    path.write_text(lines)
    path.chmod(0o644)


def start_pgbouncer(
    server_admin_url: str,
    *,
    pool_mode: str = "transaction",
    pool_size: int = 2,
    auth_type: str = "scram-sha-256",
    query_timeout: float = 0,
) -> PgBouncer:
    """PgBouncer in pool_mode with pool_size server connections per database and user, in front of
    the server of server_admin_url (an embedded test server: unix socket), checking clients'
    passwords by auth_type ("trust": none), cancelling a query that runs longer than
    query_timeout seconds (0: never). Its files live in a directory of its own that the user it
    runs as can reach; stop() removes it."""
    server = conninfo_to_dict(server_admin_url)
    directory = Path(tempfile.mkdtemp(prefix="payrail-pgbouncer-"))
    directory.chmod(0o755)
    port = unused_port()
    users = {"postgres"}
    _write_auth_file(directory, users)
    # 1.21 to 1.23 carry no prepared statements in transaction mode unless told to, 1.24 and later do:
    # the tests run the version that cannot, whichever is installed.
    prepared_statements = "max_prepared_statements = 0" if version() >= (1, 21) else ""
    config = directory / "pgbouncer.ini"
    config.write_text(
        f"""
[databases]
* = host={server["host"]} port={server.get("port", 5432)}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = {auth_type}
auth_file = {directory / "userlist.txt"}
pool_mode = {pool_mode}
default_pool_size = {pool_size}
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 500
max_db_connections = 0
server_reset_query = DISCARD ALL
query_timeout = {query_timeout}
logfile = {directory / "pgbouncer.log"}
pidfile = {directory / "pgbouncer.pid"}
log_connections = 0
log_disconnections = 0
{prepared_statements}
"""
    )
    config.chmod(0o644)
    (directory / "pgbouncer.log").touch(mode=0o666)
    (directory / "pgbouncer.log").chmod(0o666)
    # PgBouncer refuses to run as root; as root (this machine), it runs as the embedded servers' user.
    as_user = ["-u", "pgserver"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(directory, "pgserver")
    with (directory / "pgbouncer.log").open("a") as output:  # what it says before it opens its logfile
        process = subprocess.Popen([PGBOUNCER, *as_user, str(config)], stdout=output, stderr=subprocess.STDOUT)
    bouncer = PgBouncer(directory, port, process, users)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited ({process.returncode}): {bouncer.log}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return bouncer
        except OSError:
            time.sleep(0.05)
    bouncer.stop()
    raise RuntimeError(f"pgbouncer did not listen on {port}: {bouncer.log}")
