"""Files an operator hands the command line, attacked: pipes, standard input, FIFOs, devices,
sockets, directories, empty inputs and lines longer than any record (payrail_embedder.base.input_files).

`import` reads a pipe, `-`, /dev/stdin or a FIFO once and saves what it held (never "saved" with
nothing saved); refuses a device, a socket or a directory in words before reading a byte; and
stops at a line longer than any record can take, in bounded memory. `eval` reads its labelled
queries with the same reader. The pipes are real (bash, a subprocess) where the process's own
standard input is the point; the rest run in process.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import psycopg
import pytest

from payrail_embedder.base.input_files import MAX_SPOOLED_BYTES, InputRefused, LineLimit, UnreadableLine, json_lines, open_input
from payrail_embedder.embedders import record_text
from payrail_embedder.registry.labelled_queries import read_labelled_queries
from payrail_embedder.registry.records import RECORD_LINE
from payrail_test_support import CLI, REPO
from payrail_test_support.cli import cli_json, run_cli, without_registry, write_jsonl
from payrail_test_support.devices import fill, small_device
from payrail_test_support.stored import assert_whole_or_nothing, rows

LIMIT_WORDS = f"the line is longer than {RECORD_LINE.bytes:,} bytes, more than any record can take"
NOT_READ = "the rest of the file was not read"


def record(n: int) -> dict:
    return {
        "provider": f"Pipe Provider {n}",
        "method": "Lookup",
        "urls": [f"https://api.example/{n}"],
        "docsUrl": None,
        "guidance": f"Purpose: record {n} read from a pipe.",
        "enabled": True,
    }


RECORDS = [record(n) for n in range(5)]
QUERIES = [{"query": "record 3 read from a pipe", "relevant": [["Pipe Provider 3", "Lookup"]]}]


def saved_providers(database_url: str) -> list[str]:
    with psycopg.connect(database_url) as conn:
        return [p for (p,) in conn.execute("select provider from payrail.provider_methods order by provider")]


def shell(env: dict[str, str], script: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """script in bash, payrail-embedder on the PATH: real pipes and redirections, as an operator types them."""
    return subprocess.run(
        ["bash", "-c", script],
        env={**env, "PATH": f"{CLI.parent}:{env['PATH']}"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def imported_all(result: subprocess.CompletedProcess, database_url: str) -> None:
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    report = json.loads(result.stdout.splitlines()[0])
    assert without_registry(report) == {"created": len(RECORDS), "updated": 0, "unchanged": 0, "refused": [], "saved": True, "notImported": 0}
    assert saved_providers(database_url) == sorted(r["provider"] for r in RECORDS)
    assert all(assert_whole_or_nothing(row) for row in rows(database_url))


# --- import: what may be read, read once ----------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        # eval reads its queries the same way (once is enough: the same reader, the same pipe).
        "cat catalog.jsonl | payrail-embedder import --json - && cat queries.jsonl | payrail-embedder eval --json -",
        "cat catalog.jsonl | payrail-embedder import --json /dev/stdin",
        "payrail-embedder import --json - < catalog.jsonl",
    ],
    ids=["pipe-dash", "pipe-dev-stdin", "redirected-file"],
)
def test_a_catalog_on_standard_input_is_read_once_and_saved(command, cli_env, database_url, openai_fake, tmp_path):
    """Before: `-` was no file ("does not exist"), and /dev/stdin on a pipe was read by the
    progress count, so the check and the save found nothing: "0 created ...: saved"."""
    write_jsonl(tmp_path / "catalog.jsonl", RECORDS)
    write_jsonl(tmp_path / "queries.jsonl", QUERIES)

    result = shell(cli_env, f"cd {tmp_path} && {command}")

    imported_all(result, database_url)
    evaluated = [json.loads(line) for line in result.stdout.splitlines()[1:]]
    # What was embedded: every record's text, and eval's query (a request the client retried under load counts once).
    embedded = {text for request in openai_fake.requests for text in request["input"]}
    expected = {record_text(r["provider"], r["method"], r["guidance"]) for r in RECORDS}
    assert embedded == expected | ({QUERIES[0]["query"]} if evaluated else set())
    assert [(e["queries"], e["metrics"]["hit@3"]) for e in evaluated] == ([(1, 1.0)] if "eval" in command else [])


def test_a_fifo_fed_by_a_writer_is_read_once_and_saved(cli_env, database_url, tmp_path):
    fifo = tmp_path / "catalog.fifo"
    os.mkfifo(fifo)
    text = "".join(json.dumps(r) + "\n" for r in RECORDS).encode()

    def write_slowly():
        with open(fifo, "wb") as writer:  # opens once the import opens its end
            for start in range(0, len(text), 50):
                writer.write(text[start : start + 50])
                writer.flush()

    writer = threading.Thread(target=write_slowly)
    writer.start()
    result = run_cli(cli_env, "import", "--json", fifo)
    writer.join(timeout=30)

    assert not writer.is_alive()
    imported_all(result, database_url)


@pytest.mark.parametrize("content", ["", "\n \n\t\n"], ids=["empty", "blank-lines"])
def test_an_input_with_no_records_is_refused_never_saved(content, cli_env, database_url, tmp_path):
    """An empty pipe is what a failed writer leaves (`broken-export | payrail-embedder import -`)."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text(content)
    catalog = write_jsonl(tmp_path / "catalog.jsonl", RECORDS)

    for args, source in ((["-"], "<stdin>"), ([str(catalog), str(empty)], str(empty))):
        result = run_cli(cli_env, "import", *args, input=content)
        assert result.returncode == 2 and "saved" not in result.stdout, (result.stdout, result.stderr)
        assert f"invalid_input: {source} holds no records (it is empty, or its lines are blank): nothing imported" in result.stderr
    assert saved_providers(database_url) == []


# --- import: what is refused before a byte is read ------------------------------------------------


@pytest.mark.parametrize(
    ("command", "refusal"),
    [
        ("payrail-embedder import /dev/zero", "invalid_input: /dev/zero is a character device, not a file"),
        ("payrail-embedder import - < /dev/urandom", "invalid_input: <stdin> is a character device, not a file"),
        ("cat /dev/zero | payrail-embedder import -", f"refused <stdin>:1: {LIMIT_WORDS}"),
        ("payrail-embedder import - <&-", "invalid_input: <stdin> is closed: pipe the file into it, or name the file"),
    ],
    ids=["dev-zero", "stdin-dev-urandom", "dev-zero-piped", "stdin-closed"],
)
def test_endless_devices_and_a_closed_standard_input_are_refused_at_once(command, refusal, cli_env, database_url):
    """Before: `import /dev/zero` read one endless line into memory (the progress count read
    whole lines) until the machine ran out; now the device is refused by kind, and a pipe of
    zeros stops at its first line's limit (the subprocess's timeout bounds the test)."""
    result = shell(cli_env, command)

    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert refusal in result.stderr, result.stderr
    assert saved_providers(database_url) == []


def short_socket_path() -> Path:
    """A Unix socket's path must fit in 108 bytes; the test's own directory may be longer."""
    return Path(tempfile.mkdtemp(prefix="payrail-sock-")) / "catalog.sock"


def test_a_socket_a_directory_and_a_device_are_refused_in_words(cli_env, database_url, tmp_path):
    path = short_socket_path()
    listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listening.bind(str(path))
    listening.listen()
    try:
        for named, words in (
            (path, f"{path} is a socket, not a file: name a file, a FIFO, or - for standard input"),
            (tmp_path, f"Invalid value for 'FILES...': File '{tmp_path}' is a directory."),
            ("/dev/urandom", "/dev/urandom is a character device, not a file"),
            ("/dev/null", "/dev/null is a character device, not a file"),
        ):
            code, failure, _ = cli_json(cli_env, "import", "--json", named)
            assert (code, failure["error"]) == (2, "invalid_input") and words in failure["detail"], failure
    finally:
        listening.close()
        path.unlink()
        path.parent.rmdir()
    assert saved_providers(database_url) == []


# --- import: a line longer than any record ---------------------------------------------------------


def escaped(text: str) -> str:
    """text as a JSON string at its longest: every character a \\u escape, those outside the Basic
    Multilingual Plane as an escaped surrogate pair (12 bytes a character)."""
    units = text.encode("utf-16-be")
    return '"' + "".join(f"\\u{int.from_bytes(units[i : i + 2], 'big'):04x}" for i in range(0, len(units), 2)) + '"'


def longest_line(n: int) -> str:
    """A valid record with every field at its longest, written as long as JSON can write it."""
    wide = "\U00020000"  # a CJK ideograph (Extension B), the same in NFC and NFKC: 4 bytes in UTF-8, 12 escaped
    # Hosts in ASCII: the write path stores a host in its IDNA form, which would outgrow the URL's limit.
    urls = [f"https://x.example/{n}{i}" + wide * (2_048 - len(f"https://x.example/{n}{i}")) for i in range(10)]
    fields = {
        "provider": wide * 119 + str(n),
        "method": wide * 120,
        "urls": urls,
        "docsUrl": urls[0].replace("https://", "https://d", 1)[:2_048],
        "guidance": wide * 8_000,
        "enabled": True,
    }

    def value(v):
        if isinstance(v, list):
            return "[ " + " , ".join(value(item) for item in v) + " ]"
        return escaped(v) if isinstance(v, str) else json.dumps(v)

    return "{ " + " , ".join(f"{escaped(k)} : {value(v)}" for k, v in fields.items()) + " }\n"


def test_the_line_limit_holds_the_longest_record_json_can_write_and_refuses_one_byte_more(cli_env, database_url, tmp_path):
    """The bound is the record's limits at their worst (records.RECORD_LINE): a record at every
    limit, every character escaped, fits, and is saved; a line one byte over the bound is refused."""
    longest = longest_line(0)
    assert 0.98 * RECORD_LINE.bytes < len(longest.encode()) <= RECORD_LINE.bytes  # the bound is tight, not a guess
    padded = json.dumps(record(1))[:-1] + " " * (RECORD_LINE.bytes - len(json.dumps(record(1))) - 1) + "}\n"
    assert len(padded.encode()) == RECORD_LINE.bytes
    catalog = tmp_path / "catalog.jsonl"
    catalog.write_text(longest + padded)

    code, report, _ = cli_json(cli_env, "import", "--json", catalog)
    assert (code, report["created"], report["saved"]) == (0, 2, True), report

    catalog.write_text(padded.replace("}\n", " }\n").replace("record 1", "record 2"))
    code, report, _ = cli_json(cli_env, "import", "--json", catalog)
    assert (code, report["saved"]) == (2, False), report
    assert report["refused"] == [{"source": str(catalog), "line": 1, "reason": f"{LIMIT_WORDS} (docs/operators.md, Catalog files); {NOT_READ}"}]
    assert len(saved_providers(database_url)) == 2


def test_a_line_longer_than_any_record_stops_the_read_and_saves_nothing(cli_env, database_url, tmp_path):
    catalog = tmp_path / "catalog.jsonl"
    lines = [json.dumps(record(0)), json.dumps(record(1)), '{"provider": "' + "x" * 1_000_000 + '"}', json.dumps(record(2))]
    catalog.write_text("\n".join(lines) + "\n")

    code, report, _ = cli_json(cli_env, "import", "--json", catalog)
    assert (code, report["saved"], report["notImported"]) == (2, False, 2), report
    assert [(r["line"], r["reason"].startswith(LIMIT_WORDS) and r["reason"].endswith(NOT_READ)) for r in report["refused"]] == [(3, True)]
    assert saved_providers(database_url) == []

    # --skip-invalid saves the lines before it; those after it were never read, and the report says so.
    code, report, _ = cli_json(cli_env, "import", "--json", "--skip-invalid", catalog)
    assert (code, report["created"], [r["line"] for r in report["refused"]]) == (2, 2, [3]), report
    assert saved_providers(database_url) == ["Pipe Provider 0", "Pipe Provider 1"]


class Zeros(io.RawIOBase):
    """An endless stream of zero bytes, as /dev/zero gives, counting what was read from it."""

    def __init__(self) -> None:
        self.handed_out = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        buffer[:] = bytes(len(buffer))
        self.handed_out += len(buffer)
        return len(buffer)


def test_an_endless_line_is_refused_after_reading_one_limit_of_it():
    zeros = Zeros()
    limit = LineLimit(1_000, "more than the test allows")

    lines = list(json_lines(io.BufferedReader(zeros), limit))

    assert lines == [UnreadableLine(1, "the line is longer than 1,000 bytes, more than the test allows; the rest of the file was not read")]
    assert zeros.handed_out <= limit.bytes + io.DEFAULT_BUFFER_SIZE, zeros.handed_out


def test_a_pipe_is_read_at_most_to_its_bound(tmp_path):
    """A writer that never stops (/dev/urandom piped in) fills no disk: the copy stops at the bound."""
    fifo = tmp_path / "endless.fifo"
    os.mkfifo(fifo)
    line = b'{"provider": "x"}\n'

    def write_until_refused():
        with contextlib.suppress(BrokenPipeError), open(fifo, "wb") as writer:
            while True:
                writer.write(line * 100)

    writer = threading.Thread(target=write_until_refused)
    writer.start()
    with pytest.raises(InputRefused) as refused:
        with open_input(fifo, line_limit=RECORD_LINE, max_spooled=10_000):
            pass
    writer.join(timeout=30)

    assert not writer.is_alive()
    assert str(refused.value) == (f"{fifo} holds more than 10,000 bytes, the most read from a pipe or standard input: write it to a file and name the file")
    assert MAX_SPOOLED_BYTES == 1_000_000_000  # docs/operators.md says 1 GB


def test_a_pipe_spooled_onto_a_full_disk_says_the_disk_is_full_and_saves_nothing(cli_env, database_url, tmp_path):
    """A pipe is copied into $TMPDIR first: a full one was `<stdin> cannot be read: No space left
    on device`, as if the pipe had failed. (A page is left free: Python takes a $TMPDIR where it
    cannot write a few bytes for none, and goes on to /tmp.)"""
    with small_device(tmp_path / "tmp", 1) as tmp:
        fill(tmp, leave=4096)
        write_jsonl(tmp_path / "catalog.jsonl", [record(n) for n in range(100)])  # 18 kB

        result = shell({**cli_env, "TMPDIR": str(tmp)}, f"cat {tmp_path / 'catalog.jsonl'} | payrail-embedder import -")

    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert (
        f"Error: unavailable: the disk is full: no space left on the device that holds {tmp}; "
        "set TMPDIR to a directory with room, or write the input to a file and name the file"
    ) in result.stderr
    assert saved_providers(database_url) == []


# --- eval reads its labelled queries with the same reader -----------------------------------------


def test_eval_refuses_what_import_refuses_in_words(cli_env, tmp_path):
    """Before: eval read whole lines whatever their length, a line that was not UTF-8 ended in a
    traceback, and /dev/zero never ended."""
    overlong = tmp_path / "overlong.jsonl"
    overlong.write_text(json.dumps(QUERIES[0]) + "\n" + '{"query": "' + "x" * 400_000 + '"}\n')
    not_utf8 = tmp_path / "latin1.jsonl"
    not_utf8.write_bytes(json.dumps(QUERIES[0]).encode() + b"\n" + '{"query": "caf\xe9"}\n'.encode("latin-1"))
    nested = tmp_path / "nested.jsonl"
    nested.write_text("[" * 100_000 + "\n")
    limit = (
        f"the line is longer than {RECORD_LINE.bytes:,} bytes, more than a labelled query line may take (docs/operators.md, Labelled query files); {NOT_READ}"
    )

    for path, detail in (
        (overlong, f"{overlong}:2: {limit}"),
        (not_utf8, f"{not_utf8}:2: not valid UTF-8 (byte 15 of the line)"),
        (nested, f"{nested}:1: malformed JSON: nested too deeply"),
        ("/dev/zero", "/dev/zero is a character device, not a file: name a file, a FIFO, or - for standard input"),
    ):
        code, failure, _ = cli_json(cli_env, "eval", "--json", path)
        assert (code, failure) == (2, {"error": "invalid_input", "detail": detail})


# --- labelled query files: each line and the whole within bounds ----------------------------------

LABELLED_COMMANDS = {
    "eval": ("eval", "--json"),
    "golden-import": ("golden", "import", "--json"),
    "model-tune": ("model", "tune", "--json"),
}


def golden_queries_in(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        return conn.execute("select count(*) from payrail.golden_queries").fetchone()[0]


@pytest.mark.parametrize("command", LABELLED_COMMANDS)
def test_a_labelled_line_naming_more_records_than_a_golden_query_may_is_refused_and_changes_nothing(command, cli_env, database_url, openai_fake, tmp_path):
    """A golden query names at most 100 records (the registry's golden_query_records_ordinal_check);
    every reader of the format holds a file's lines to it, before the database or the embedder is
    asked. A line listing a million is longer than any line may be: refused with at most a line's
    limit of it read. (`model tune` reads it first of all: on this registry of OpenAI's model,
    which it cannot tune, the refusal is the file's.)"""
    cli_import_records(cli_env, tmp_path)
    requests = len(openai_fake.requests)
    many = tmp_path / "many.jsonl"
    many.write_text(json.dumps(QUERIES[0]) + "\n" + json.dumps({"query": "q", "relevant": [[f"P{n}", "Lookup"] for n in range(101)]}) + "\n")
    million = tmp_path / "million.jsonl"
    million.write_text(json.dumps({"query": "q", "relevant": [["P", "M"]] * 1_000_000}) + "\n")

    for path, detail in (
        (many, f"{many}:2: relevant names 101 records; a labelled query may name at most 100, as a golden query may"),
        (million, f"{million}:1: the line is longer than {RECORD_LINE.bytes:,} bytes"),
    ):
        code, failure, stderr = cli_json(cli_env, *LABELLED_COMMANDS[command], path)
        assert (code, failure["error"]) == (2, "invalid_input") and failure["detail"].startswith(detail), (failure, stderr)

    assert golden_queries_in(database_url) == 0 and len(openai_fake.requests) == requests, "something was saved or embedded"
    assert not (Path(cli_env["PAYRAIL_DATA_DIR"]) / "models").exists()


def cli_import_records(env: dict[str, str], tmp_path: Path) -> None:
    result = run_cli(env, "import", write_jsonl(tmp_path / "catalog.jsonl", RECORDS))
    assert result.returncode == 0, result.stderr


QUERY_LINE = json.dumps(QUERIES[0]) + "\n"


def test_a_labelled_file_holds_at_most_50000_queries(cli_env, database_url, openai_fake, tmp_path):
    """Millions of lines: eval holds its queries (it embeds them in one batch), so the 50,001st
    query is refused, naming its line, and nothing after it is read, nor anything embedded."""
    most = tmp_path / "most.jsonl"
    most.write_text(QUERY_LINE * 50_000)
    assert len(read_labelled_queries(most)) == 50_000
    requests = len(openai_fake.requests)

    with most.open("a") as more:
        more.write(QUERY_LINE)
    code, failure, _ = cli_json(cli_env, "eval", "--json", most)

    assert (code, failure["error"]) == (2, "invalid_input")
    assert failure["detail"] == (
        f"{most}:50001: more than 50,000 labelled queries, the most a file may hold (docs/operators.md, Labelled query files): "
        "split it; the rest of the file was not read"
    )
    assert len(openai_fake.requests) == requests


def test_a_labelled_file_is_read_to_16_mb_from_a_file_or_an_endless_pipe(cli_env, database_url, openai_fake, tmp_path):
    """Long lines, fewer than 50,000 of them, beyond 16 MB in all: refused at the line that goes
    past it, whether the file is named or piped; `yes` never stops writing, and eval stops reading."""
    long_line = json.dumps({"query": "x" * 1_990, "relevant": [["Pipe Provider 3", "Lookup"]]}) + "\n"
    past = 16_000_000 // len(long_line.encode()) + 1  # the line that takes the file past 16,000,000 bytes
    big = tmp_path / "big.jsonl"
    big.write_text(long_line * (past + 100))
    refusal = "the input is longer than 16,000,000 bytes, the most a labelled query file may take (docs/operators.md, Labelled query files): split it"

    code, failure, _ = cli_json(cli_env, "eval", "--json", big)
    assert (code, failure["detail"]) == (2, f"{big}:{past}: {refusal}; the rest of the file was not read"), failure

    for command, source in ((f"cat {big} | payrail-embedder eval -", "<stdin>"), (f"yes '{long_line.strip()}' | payrail-embedder eval -", "<stdin>")):
        result = shell(cli_env, command, timeout=120)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert f"invalid_input: {source}:{past}: {refusal}" in result.stderr, result.stderr
    assert [len(request["input"]) for request in openai_fake.requests] == []
