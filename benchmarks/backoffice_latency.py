"""Latency and page size of the backoffice at 100,000 records loaded through the product: the pages
an operator opens and the saves they make. Not a test: it prints a table.

    ./scripts/benchmark backoffice_latency [--records 100000] [--requests 30]

What it does:
- starts its own throwaway embedded PostgreSQL 18 (autovacuum off) in a temporary directory,
  applies db/ and deletes everything when it ends;
- writes --records generated records (nine in ten enabled; guidance of random words from a small
  vocabulary, as agent_latency's) to a JSON Lines file and imports it with `payrail-embedder
  import`, the write path every operator uses: every line checked against every rule, embedded,
  saved. The embedding service is payrail_test_support's OpenAI-compatible fake at 384
  dimensions (the local model's), which answers at once: the local model would take about an
  hour for 100,000 records on two cores, and the pages cost the same whatever the vectors are.
  Nothing else is done to the database before the records list is timed: no statistics, as an
  import leaves a registry; then it runs `vacuum (analyze)` and times the list again;
- runs `payrail-embedder backoffice` on that registry and embedder, signs in with a login made as
  `payrail-embedder operator add` makes one (the server asks its password, as on the embedded
  default) and times, over one kept-alive HTTP connection that accepts
  gzip as browsers do: the records list's first page, a page deep in the list (reached by a page
  link), the list filtered by text (a common word, a rare word, part of a URL, a provider's
  second page, one character) and by a state, each with its count of matches; then one record page, a URL-only save, a content save (embedded by the fake first) and
  Try a query (two query embeddings by the fake). On loopback the time is the server's.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
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
import psycopg
from psycopg.rows import dict_row

from agent_latency import DIMENSIONS, generated_rows, percentile
from payrail_embedder.postgres import connection, local_server, logins
from payrail_embedder.registry import stored
from payrail_test_support.environments import cli_environment
from payrail_test_support.openai_fake import FakeOpenAI
from throwaway_postgres import throwaway_postgres

REPO = Path(__file__).resolve().parents[1]
CLI = Path(sys.executable).parent / "payrail-embedder"
QUERY = "find live hotel availability through a paid API"
COMMON_WORD = "hotel"
OPERATOR_LOGIN = ("bench_operator", "a benchmark passphrase")


class Browser:
    """One kept-alive HTTP connection with the session's cookies, asking for gzip as a browser does."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)
        self.cookies: dict[str, str] = {}
        # Bytes on the wire and unpacked, of the last response.
        self.sent = self.unpacked = 0

    def request(self, method: str, path: str, form: dict | None = None) -> tuple[int, str, str | None]:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items()), "Accept-Encoding": "gzip"}
        body = None
        if form is not None:
            body = urlencode(form)
            headers |= {"Content-Type": "application/x-www-form-urlencoded", "Origin": self.origin}
        self.conn.request(method, path, body=body, headers=headers)
        response = self.conn.getresponse()
        raw = response.read()
        data = gzip.decompress(raw) if response.getheader("content-encoding") == "gzip" else raw
        self.sent, self.unpacked = len(raw), len(data)
        for name, value in response.getheaders():
            if name.lower() == "set-cookie":
                key, _, rest = value.partition("=")
                self.cookies[key] = rest.split(";", 1)[0]
        return response.status, data.decode(), response.getheader("location")


def token_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def with_operator_login(server, url: str) -> None:
    """The embedded default's pg_hba.conf on server, and OPERATOR_LOGIN on it, as `operator add` makes it."""
    local_server.use_hba_rules(server.admin_url, local_server.EMBEDDED_HBA)
    with connection.connect(url, autocommit=True) as conn:
        logins.add_operator(conn, *OPERATOR_LOGIN)


def start_backoffice(url: str, log: Path, *args: str, cli: Path = CLI, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """`cli backoffice --port 0 ARGS` on the registry at url (with the local model, unless env says
    otherwise); returns the process and its address."""
    if env is None:
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


def write_catalog(path: Path, records: int) -> None:
    rng, np_rng = random.Random(42), np.random.default_rng(42)
    with path.open("w", encoding="utf-8") as file:
        for n, (provider, method, urls, docs_url, guidance, _) in enumerate(generated_rows(0, records, rng, np_rng)):
            record = {"provider": provider, "method": method, "urls": urls, "docsUrl": docs_url, "guidance": guidance, "enabled": n % 10 != 0}
            file.write(json.dumps(record) + "\n")


def deep_cursor(url: str, position: int) -> str:
    """A page link's cursor: the records after the one at position in the list's order."""
    with connection.connect(url) as conn:
        row = (
            conn.cursor(row_factory=dict_row)
            .execute(
                """select pm.id, pg_catalog.lower(pm.provider) as provider_key, pg_catalog.lower(pm.method) as method_key
                from payrail.provider_methods as pm
                order by pg_catalog.lower(pm.provider), pg_catalog.lower(pm.method), pm.id offset %s limit 1""",
                (position,),
            )
            .fetchone()
        )
    return stored.encode_cursor(row)


def list_pages(browser: Browser, database_url: str, records: int, requests: int) -> list[tuple[str, list[float], int, int]]:
    """The records list: unfiltered, deep, and filtered by text (each with its count of matches) and by state."""
    rare = f"op{records // 2}"
    part_of_url = f"bench{records // 20}.example"
    provider = "bench provider 001"
    pages = [
        ("records list, first page", "/records", f"Records: {records}."),
        ("records list, a page deep in the list", f"/records?{urlencode({'after': deep_cursor(database_url, records - 150)})}", "Previous page"),
        (f"filtered by a common word ({COMMON_WORD})", f"/records?{urlencode({'q': COMMON_WORD})}", "records match."),
        (f"filtered by a rare word ({rare})", f"/records?{urlencode({'q': rare})}", f"1 of {records} records match."),
        (f"filtered by part of a URL ({part_of_url})", f"/records?{urlencode({'q': part_of_url})}", f"5 of {records} records match."),
        (
            f"filtered by a provider ({provider}), page 2",
            f"/records?{urlencode({'q': provider, 'after': filtered_cursor(browser, provider)})}",
            "records match.",
        ),
        ("filtered by one character (q)", f"/records?{urlencode({'q': 'q'})}", "records match."),
        ("filtered by state (drafts)", f"/records?{urlencode({'state': 'draft'})}", "records match."),
    ]
    return [timed_page(browser, label, path, requests, check) for label, path, check in pages]


def timed_page(browser: Browser, label: str, path: str, requests: int, check: str | None = None) -> tuple[str, list[float], int, int]:
    """A row of the table: `requests` timed GETs of path, after one (which must hold `check`) for its sizes."""
    text = browser_get(browser, path)
    if check:
        assert check in text, (label, text[:2000])
    sent, unpacked = browser.sent, browser.unpacked
    return label, [timed_get(browser, path) for _ in range(requests)], sent, unpacked


def browser_get(browser: Browser, path: str) -> str:
    status, text, _ = browser.request("GET", path)
    assert status == 200, (path, status, text[:500])
    return text


def timed_get(browser: Browser, path: str) -> float:
    started = time.perf_counter()
    browser_get(browser, path)
    return (time.perf_counter() - started) * 1000


def filtered_cursor(browser: Browser, text: str) -> str:
    """The cursor of the first page's "Next page" link of a text filter."""
    page = browser_get(browser, f"/records?{urlencode({'q': text})}")
    return re.search(r'href="/records\?[^"]*after=([^"&]+)', unescape(page)).group(1)


def sign_in(url: str) -> Browser:
    browser = Browser(url)
    _, page, _ = browser.request("GET", "/sign-in")
    login, password = OPERATOR_LOGIN
    status, _, location = browser.request("POST", "/sign-in", {"csrf_token": token_of(page), "username": login, "password": password})
    assert (status, location) == (303, "/records"), status
    return browser


def record_pages(browser: Browser, requests: int) -> list[tuple[str, list[float], int, int]]:
    """A record page, a URL-only save, a content save and Try a query."""
    ids = [int(i) for i in re.findall(r'<a href="/records/(\d+)">', browser_get(browser, "/records"))]
    rows = [timed_page(browser, "record page", f"/records/{ids[0]}", requests)]
    edited = random.Random(7).choice(ids)

    def save(changes):
        form = record_form(browser_get(browser, f"/records/{edited}"), **changes)
        started = time.perf_counter()
        status, text, _ = browser.request("POST", f"/records/{edited}", form)
        elapsed = (time.perf_counter() - started) * 1000
        assert status == 303, text[:2000]
        return elapsed

    rows.append(("URL-only save (vector kept)", [save({"docsUrl": f"https://docs.bench.example/v{i}"}) for i in range(requests)], 0, 0))
    guidance = record_form(browser_get(browser, f"/records/{edited}"))["guidance"]
    rows.append(("content save (embedded first)", [save({"guidance": f"{guidance}\nNotes: edit {i}."}) for i in range(requests)], 0, 0))
    rows.append(timed_page(browser, "Try a query (2 query embeddings)", f"/records/{ids[1]}?{urlencode({'query': QUERY})}", requests, "What agents get now"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="records in the registry, imported through the product")
    parser.add_argument("--requests", type=int, default=30, help="timed requests per row")
    args = parser.parse_args()

    fake = FakeOpenAI(dimensions=DIMENSIONS).start()
    # Autovacuum off: the first pages are timed as an import leaves a registry (no statistics),
    # the second time after `vacuum (analyze)`, as autovacuum leaves it later.
    with throwaway_postgres(18, {"autovacuum": "off"}) as server, tempfile.TemporaryDirectory(prefix="payrail-bench-") as scratch:
        url = server.registry("payrail_bench")
        env = cli_environment(url, fake, Path(scratch))
        catalog_file = Path(scratch) / "catalog.jsonl"
        write_catalog(catalog_file, args.records)
        started = time.perf_counter()
        result = subprocess.run([str(CLI), "import", str(catalog_file)], env=env, capture_output=True, text=True, cwd=REPO)
        import_seconds = time.perf_counter() - started
        assert result.returncode == 0, result.stdout + result.stderr
        fake.requests.clear()  # the fake keeps every request; these are done with
        with_operator_login(server, url)
        process, base_url = start_backoffice(url, Path(scratch) / "backoffice.log", env=env)
        try:
            browser = sign_in(base_url)
            unanalyzed = list_pages(browser, url, args.records, args.requests)
            with psycopg.connect(url, autocommit=True) as conn:  # VACUUM runs in no transaction
                # Every table, as autovacuum would by and by: the list reads the entries more than the records.
                conn.execute("vacuum (analyze)")
            browser.conn.close()  # the server closed it, idle for longer than its keep-alive; the next request reopens it
            analyzed = list_pages(browser, url, args.records, args.requests)
            others = record_pages(browser, args.requests)
        finally:
            process.terminate()
            process.wait(30)
    fake.stop()

    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(
        f"backoffice at {args.records:,} records (imported through `payrail-embedder import` in {import_seconds:.0f} s; "
        f"autovacuum off); {args.requests} timed requests per row over one kept-alive connection; "
        f"{os.cpu_count()} CPUs (load average {load}); embedded PostgreSQL 18; embeddings from an OpenAI-compatible fake "
        "that answers at once"
    )
    print(f"{'request':<52} {'state':<20} {'p50 ms':>8} {'p95 ms':>8} {'gzip kB':>8} {'page kB':>8}")
    for state, rows in (("right after import", unanalyzed), ("after vacuum analyze", analyzed), ("after vacuum analyze", others)):
        for name, samples, sent, unpacked in rows:
            sizes = f"{sent / 1000:>8.1f} {unpacked / 1000:>8.1f}" if unpacked else f"{'':>8} {'':>8}"
            print(f"{name:<52} {state:<20} {statistics.median(samples):>8.1f} {percentile(samples, 0.95):>8.1f} {sizes}")


if __name__ == "__main__":
    main()
