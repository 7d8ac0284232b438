"""Latency of the backoffice at 10,000 records: the pages an operator opens and the saves they make,
with the real local model (all-MiniLM-L6-v2). Not a test: it prints a table.

    ./scripts/benchmark backoffice_latency [--records 10000] [--requests 30]

What it does:
- starts its own throwaway embedded PostgreSQL 18 in a temporary directory, applies db/ and
  deletes everything when it ends;
- imports the shipped sample catalog embedded with the real model, then fills the registry up to
  --records enabled records as agent_latency does (generated records with random unit vectors
  inserted with SQL: embedding 10,000 records takes minutes on two cores, and the pages cost the
  same whatever the vectors are);
- runs `payrail-embedder backoffice` as a subprocess (local model), signs in with a login made as
  `payrail-embedder operator add` makes one (the server asks its password, as on the embedded
  default) and times, over one kept-alive HTTP connection as a browser uses: the records list (every record), the list filtered by a word, one record page (form,
  history, no query), a URL-only save (the form's POST, answered with a redirect; the vector is
  kept), a content save (the guidance changes: embedded by the local model first, then saved),
  and Try a query (a plain-words question: what agents get and the preview, each embedding it).
  The first content save, which loads the model, is timed on its own.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from html import unescape
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import numpy as np

from agent_latency import fill_to, percentile
from payrail_embedder import catalog, database, logins
from payrail_embedder.embedders import LOCAL_DEFAULT_MODEL, LocalEmbedder
from payrail_embedder.records import read_lines
from throwaway_postgres import throwaway_postgres

REPO = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).parent / "payrail-embedder"
QUERY = "find live hotel availability through a paid API"
OPERATOR_LOGIN = ("bench_operator", "a benchmark passphrase")


class Browser:
    """One kept-alive HTTP connection with the session's cookies, as a browser keeps them."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, form: dict | None = None) -> tuple[int, str, str | None]:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        body = None
        if form is not None:
            body = urlencode(form)
            headers |= {"Content-Type": "application/x-www-form-urlencoded", "Origin": self.origin}
        self.conn.request(method, path, body=body, headers=headers)
        response = self.conn.getresponse()
        text = response.read().decode()
        for name, value in response.getheaders():
            if name.lower() == "set-cookie":
                key, _, rest = value.partition("=")
                self.cookies[key] = rest.split(";", 1)[0]
        return response.status, text, response.getheader("location")


def token_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def with_operator_login(server, url: str) -> None:
    """The embedded default's pg_hba.conf on server, and OPERATOR_LOGIN on it, as `operator add` makes it."""
    database.use_hba_rules(server.admin_url, database.EMBEDDED_HBA)
    with database.connect(url, autocommit=True) as conn:
        logins.add_operator(conn, *OPERATOR_LOGIN)


def start_backoffice(url: str, log: Path, *args: str, cli: Path = CLI) -> tuple[subprocess.Popen, str]:
    """`cli backoffice --port 0 ARGS` on the registry at url; returns the process and its address."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAYRAIL_", "OPENAI_"))}
    env |= {"PAYRAIL_DATABASE_URL": url, "PAYRAIL_EMBEDDER": "local"}
    with log.open("w") as output:
        process = subprocess.Popen([str(cli), "backoffice", "--port", "0", *args], env=env, stdout=output, stderr=subprocess.STDOUT, cwd=REPO)
    deadline = time.monotonic() + 60
    while "Application startup complete" not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise SystemExit(f"the backoffice did not start:\n{log.read_text()}")
        time.sleep(0.05)
    return process, re.search(r"Payrail backoffice: (\S+?)/?$", log.read_text(), flags=re.M).group(1)


def timed(call, times: int) -> list[float]:
    samples = []
    for index in range(times):
        started = time.perf_counter()
        call(index)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def record_form(html: str, **changes: str) -> dict:
    """The record page's form as the browser would post it, with changes."""
    def value(name):
        found = re.search(rf'<(?:input|textarea) id="{name}" name="{name}"[^>]*?(?:value="([^"]*)"[^>]*>|>\n(.*?)</textarea>)', html, flags=re.S)
        return found.group(1) if found.group(1) is not None else found.group(2)

    form = {name: unescape(value(name)) for name in ("provider", "method", "urls", "docsUrl", "guidance")}
    form |= {"csrf_token": token_of(html), "version": re.search(r'name="version" value="(\d+)"', html).group(1)}
    if re.search(r'id="enabled" name="enabled" checked', html):
        form["enabled"] = "on"
    return form | changes


def measure(url: str, requests: int) -> list[tuple[str, list[float], int]]:
    browser = Browser(url)
    status, page, _ = browser.request("GET", "/sign-in")
    login, password = OPERATOR_LOGIN
    status, _, location = browser.request("POST", "/sign-in", {"csrf_token": token_of(page), "username": login, "password": password})
    assert (status, location) == (303, "/records"), status
    status, listing, _ = browser.request("GET", "/records")
    ids = [int(i) for i in re.findall(r'<a href="/records/(\d+)">', listing)]
    rng = random.Random(7)
    rows = []

    def get(path):
        status, text, _ = browser.request("GET", path)
        assert status == 200, (path, status)
        return text

    rows.append(("records list (every record)", timed(lambda i: get("/records"), requests), len(listing)))
    filtered = get("/records?q=hotel")
    rows.append(("records list, filtered by a word", timed(lambda i: get("/records?q=hotel"), requests), len(filtered)))
    record_page = get(f"/records/{ids[0]}")
    rows.append(("record page", timed(lambda i: get(f"/records/{rng.choice(ids)}"), requests), len(record_page)))

    edited = rng.choice(ids)

    def save(changes):
        form = record_form(get(f"/records/{edited}"), **changes)
        started = time.perf_counter()
        status, text, location = browser.request("POST", f"/records/{edited}", form)
        elapsed = (time.perf_counter() - started) * 1000
        assert status == 303, text
        return elapsed

    rows.append(("URL-only save (vector kept)", [save({"docsUrl": f"https://docs.bench.example/v{i}"}) for i in range(requests)], 0))
    guidance = record_form(get(f"/records/{edited}"))["guidance"]
    first = save({"guidance": guidance + "\nNotes: edited once."})
    rows.append(("first content save (loads the model)", [first], 0))
    rows.append(("content save (local model)", [save({"guidance": f"{guidance}\nNotes: edit {i}."}) for i in range(requests)], 0))
    trial = get(f"/records/{ids[1]}?{urlencode({'query': QUERY})}")
    assert "What agents get now" in trial
    rows.append(("Try a query (2 query embeddings)", timed(lambda i: get(f"/records/{rng.choice(ids)}?{urlencode({'query': QUERY})}"), requests), len(trial)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000, help="enabled records in the registry")
    parser.add_argument("--requests", type=int, default=30, help="timed requests per row")
    args = parser.parse_args()

    with throwaway_postgres(18) as server, tempfile.TemporaryDirectory(prefix="payrail-bench-log-") as logs:
        url = server.registry("payrail_bench")
        embedder = LocalEmbedder()
        with database.connect(url, autocommit=True) as conn:
            catalog.import_records(conn, lambda: embedder, read_lines(REPO / "catalog" / "sample.jsonl"))
        fill_to(url, args.records, random.Random(42), np.random.default_rng(42))
        with_operator_login(server, url)
        process, base_url = start_backoffice(url, Path(logs) / "backoffice.log")
        try:
            rows = measure(base_url, args.requests)
        finally:
            process.terminate()
            process.wait(30)

    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(
        f"backoffice at {args.records:,} enabled records; {args.requests} timed requests per row; model "
        f"{LOCAL_DEFAULT_MODEL} on {os.cpu_count()} CPUs (load average {load}); embedded PostgreSQL 18; not analyzed by the benchmark (autovacuum on, as a server runs)"
    )
    print(f"{'request':<38} {'p50 ms':>8} {'p95 ms':>8} {'page kB':>8}")
    for name, samples, size in rows:
        page = f"{size / 1000:>8.0f}" if size else f"{'':>8}"
        print(f"{name:<38} {statistics.median(samples):>8.1f} {percentile(samples, 0.95):>8.1f} {page}")


if __name__ == "__main__":
    main()
