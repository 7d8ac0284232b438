"""Settings: where the registry is and which embedder to use, for every face of the package.

One table of settings gives both the CLI's options (each with its environment variable) and
Settings.from_env() for the Python API, the MCP server and the backoffice, so a setting is
named, parsed and defaulted in one place.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property
from pathlib import Path

import click

from .base import logs, safe_text
from .embedders import BACKENDS, Embedder, make_embedder, tuned_models
from .postgres import connection, local_server


class FiniteRange(click.FloatRange):
    """click.FloatRange for a number that must be one: nan passes every range (it compares false to
    any bound), and an infinity passes one open on that side, so both are refused here in words."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


@dataclass(frozen=True)
class Setting:
    field: str
    option: str
    envvar: str
    type: click.ParamType
    default: object
    help: str


SETTINGS = (
    Setting(
        "database_url",
        "--database-url",
        "PAYRAIL_DATABASE_URL",
        click.STRING,
        None,
        "PostgreSQL with pgvector. Unset: the embedded PostgreSQL 18 under the data directory.",
    ),
    Setting(
        "data_dir",
        "--data-dir",
        "PAYRAIL_DATA_DIR",
        click.Path(file_okay=False, path_type=Path),
        None,
        "Where the embedded PostgreSQL keeps its data, and tuned models their files (models/; default: the user's data directory).",
    ),
    Setting(
        "backend",
        "--embedder",
        "PAYRAIL_EMBEDDER",
        click.Choice(BACKENDS),
        "local",
        "Embedding backend: local (the bundled all-MiniLM-L6-v2 on ONNX Runtime, other models on sentence-transformers), or the OpenAI API (any compatible server).",
    ),
    Setting(
        "model",
        "--model",
        "PAYRAIL_EMBEDDING_MODEL",
        click.STRING,
        None,
        "Embedding model (default: text-embedding-3-small for openai; for local, all-MiniLM-L6-v2, or the registry's model when it is a tuned one).",
    ),
    Setting(
        "openai_base_url",
        "--openai-base-url",
        "OPENAI_BASE_URL",
        click.STRING,
        None,
        "OpenAI-compatible API base URL. The key is read from OPENAI_API_KEY.",
    ),
    Setting(
        "embedding_timeout",
        "--embedding-timeout",
        "PAYRAIL_EMBEDDING_TIMEOUT",
        FiniteRange(min=0.1),
        10.0,
        "Seconds for one embedding request (a batch of texts; a search's query), from the first attempt to the reply's last byte: one deadline, every retry and its wait included.",
    ),
    Setting(
        "embedding_retries",
        "--embedding-retries",
        "PAYRAIL_EMBEDDING_RETRIES",
        click.IntRange(min=0, max=10),
        2,
        "Retries of a failed embedding request (408, 409, 429, 5xx, connection errors), after a backoff or the service's Retry-After, within --embedding-timeout's deadline.",
    ),
    Setting(
        "embedding_dimensions",
        "--embedding-dimensions",
        "PAYRAIL_EMBEDDING_DIMENSIONS",
        click.IntRange(min=1, max=16000),
        None,
        "openai: ask for vectors of this many dimensions (text-embedding-3 models shorten theirs). A reply of other dimensions is refused; unset, OpenAI's own models must answer theirs (1,536 for text-embedding-3-small and ada-002, 3,072 for text-embedding-3-large).",
    ),
    Setting(
        "prepared_statements",
        "--prepared-statements",
        "PAYRAIL_PREPARED_STATEMENTS",
        click.BOOL,
        True,
        "on: a statement sent 5 times on one connection is prepared on the server. Set off behind PgBouncer in transaction mode before 1.21 (or without max_prepared_statements); left on there, the Python API and MCP server turn it off at the first error it causes, and log it: docs/operations.md.",
    ),
    Setting(
        "log_format",
        "--log-format",
        "PAYRAIL_LOG_FORMAT",
        click.Choice(logs.FORMATS),
        "logfmt",
        "How events are logged on standard error, one line each: logfmt (key=value) or json.",
    ),
    Setting(
        "log_level",
        "--log-level",
        "PAYRAIL_LOG_LEVEL",
        click.Choice(tuple(logs.LEVELS)),
        None,
        "The least severe events logged (default: info; warning for a command run on a terminal, where its answer says what it did).",
    ),
)


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    data_dir: Path | None = None
    backend: str = "local"
    model: str | None = None
    openai_base_url: str | None = None
    embedding_timeout: float = 10.0
    embedding_retries: int = 2
    embedding_dimensions: int | None = None
    prepared_statements: bool = True
    log_format: str = "logfmt"
    log_level: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **overrides) -> Settings:
        """The settings the CLI would use in this environment; overrides that are not None win.

        Raises ValueError naming the variable when one holds a value the CLI would refuse.
        """
        values = {}
        for setting in SETTINGS:
            raw = environ.get(setting.envvar)
            if not raw:
                continue  # the field's default, which is the setting's
            try:
                values[setting.field] = setting.type.convert(raw, None, None)
            except click.BadParameter as error:
                raise ValueError(f"{setting.envvar}: {error.message}") from None
        return cls(**values).with_overrides(**overrides)

    def with_overrides(self, **overrides) -> Settings:
        known = {f.name for f in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise TypeError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        return replace(self, **{name: value for name, value in overrides.items() if value is not None})

    @cached_property
    def resolved_database_url(self) -> str:
        """The configured URL, or the embedded default's; says which of libpq's variables in the
        environment (PGHOST, PGUSER, ...) apply to it and warns about those that do not. From
        here on the URL's passwords are hidden in every text that leaves the process (safe_text)."""
        safe_text.hide(self.secrets())
        honoured, ignored = connection.libpq_environment(self.database_url, os.environ)
        if honoured:
            logs.log("libpq_environment", honoured=",".join(honoured))
        if ignored and self.database_url:
            logs.log("libpq_environment", logging.WARNING, ignored=",".join(ignored), reason="PAYRAIL_DATABASE_URL names these parameters")
        elif ignored:
            logs.log(
                "libpq_environment",
                logging.WARNING,
                ignored=",".join(ignored),
                reason="PAYRAIL_DATABASE_URL is unset, so the embedded PostgreSQL is used; "
                "set PAYRAIL_DATABASE_URL=postgresql:// to connect where these variables say",
            )
        return local_server.resolve_database_url(self.database_url, self.data_dir)

    def connect(self, *, autocommit: bool = True):
        """A connection of the command line (connection.command_line_name)."""
        return connection.connect(
            self.resolved_database_url,
            autocommit=autocommit,
            prepared_statements=self.prepared_statements,
            application_name=connection.command_line_name(),
        )

    def secrets(self) -> list[str]:
        """What no text leaving the process may show: the OpenAI API key and the database URL's
        passwords, also those of a URL libpq cannot read."""
        return [os.environ.get(safe_text.API_KEY_VARIABLE, ""), *connection.url_secrets(self.database_url)]

    @property
    def models_dir(self) -> Path:
        """Where this installation keeps its tuned models (tuned_models): <data dir>/models."""
        return tuned_models.models_dir(self.data_dir)

    def embedder(self) -> Embedder:
        return make_embedder(
            self.backend,
            self.model,
            openai_base_url=self.openai_base_url,
            timeout=self.embedding_timeout,
            max_retries=self.embedding_retries,
            dimensions=self.embedding_dimensions,
            models_dir=self.models_dir,
        )


def settings_options(command: Callable) -> Callable:
    """Adds every setting as a click option (with its environment variable) to command."""
    for setting in reversed(SETTINGS):
        command = click.option(
            setting.option,
            setting.field,
            envvar=setting.envvar,
            show_envvar=True,
            type=setting.type,
            default=setting.default,
            show_default=setting.default is not None,
            help=setting.help,
        )(command)
    return command
