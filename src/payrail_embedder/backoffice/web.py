"""The plumbing between requests and pages: templates, cookies, the signed-in check with its CSRF
token, and running the package's functions on the session's connection in a worker thread, opened
again when it broke or when its password is due to be checked again."""

from __future__ import annotations

import functools
import re
import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import jinja2
import markupsafe
import psycopg
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from ..base.safe_text import escape_controls
from ..postgres.connection import DatabaseUnavailable
from ..quality import golden_answers, rank_words
from .sessions import Session, duration

HERE = Path(__file__).resolve().parent
SESSION_COOKIE = "payrail_session"
# Before sign-in there is no session: the sign-in form's token is paired with this cookie instead.
SIGN_IN_COOKIE = "payrail_sign_in"
CSRF_FIELD = "csrf_token"


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# Autoescaping everywhere: every value a page shows is text, never markup (guidance included).
templates = Jinja2Templates(env=jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, undefined=jinja2.StrictUndefined))
templates.env.filters["when"] = _when
templates.env.filters["duration"] = duration
# For role names, which PostgreSQL lets hold any character but NUL: a line break or an escape
# sequence in one is shown as its escape, not folded into a space or left invisible.
templates.env.filters["visible"] = escape_controls
# A refusal names the record it collides with ('record 42, "Acme / Geocode"'): a link to it. The
# quote after the comma keeps a refused URL's text (quoted as JSON, its quotes escaped) from linking.
RECORD_NAMED = re.compile(r"\brecord (\d+)(?=, &#34;)")


def _record_links(text: str) -> markupsafe.Markup:
    escaped = str(markupsafe.escape(text))
    return markupsafe.Markup(RECORD_NAMED.sub(r'<a href="/records/\1">record \1</a>', escaped))


templates.env.filters["record_links"] = _record_links
# Ranks in words, as the CLI says them (quality/rank_words.py), and how many moves a preview lists.
templates.env.globals["move_words"] = rank_words.move_in_words
templates.env.globals["moves_shown"] = golden_answers.MOVES_SHOWN


def render(request: Request, template: str, status_code: int = 200, **context) -> Response:
    session: Session | None = getattr(request.state, "session", None)
    messages = []
    if session is not None:
        messages = list(session.messages)
        session.messages.clear()
    return templates.TemplateResponse(request, template, {"session": session, "messages": messages, **context}, status_code=status_code)


def redirect(url: str) -> Response:
    # 303: after a POST the browser GETs the page (Post/Redirect/Get), so reloading never resubmits.
    return RedirectResponse(url, status_code=303)


def set_cookie(request: Request, response: Response, name: str, value: str) -> None:
    secure = request.url.scheme == "https" or request.app.state.secure_cookies
    response.set_cookie(name, value, httponly=True, samesite="strict", secure=secure, path="/")


def sign_in_token(request: Request) -> str:
    return request.cookies.get(SIGN_IN_COOKIE) or secrets.token_urlsafe(32)


def same_token(given: object, expected: str | None) -> bool:
    return isinstance(given, str) and expected is not None and secrets.compare_digest(given.encode(), expected.encode())


Endpoint = Callable[[Request], Awaitable[Response]]


def signed_in(page: Callable[[Request, Session], Awaitable[Response]]) -> Endpoint:
    """Runs page with the request's session, or sends the browser to sign in."""

    @functools.wraps(page)
    async def endpoint(request: Request) -> Response:
        session = await _session(request)
        return session if isinstance(session, Response) else await page(request, session)

    return endpoint


def signed_in_form(handler: Callable[[Request, Session, FormData], Awaitable[Response]]) -> Endpoint:
    """signed_in for the POST of a form: reads the form and refuses it unless it carries the
    session's CSRF token."""

    @functools.wraps(handler)
    async def endpoint(request: Request) -> Response:
        session = await _session(request)
        if isinstance(session, Response):
            return session
        try:
            form = await request.form()
        except HTTPException as error:  # the form parser's limits: more than 1,000 fields, a field over 1 MB
            return render(request, "message.html", 400, title="Refused", text=f"Refused: {error.detail} Nothing was changed.")
        if not same_token(form.get(CSRF_FIELD), session.csrf_token):
            return render(
                request,
                "message.html",
                403,
                title="Refused",
                text="Refused: the form did not carry this session's security token, so nothing was changed. Open the page again and repeat what you did.",
            )
        return await handler(request, session, form)

    return endpoint


async def _session(request: Request) -> Session | Response:
    """The request's session (kept for the page it renders), or the redirect that sends the browser to sign in."""
    cookie = request.cookies.get(SESSION_COOKIE)
    # In a worker thread: ending an expired session waits for its connection to be free.
    session = await run_in_threadpool(request.app.state.sessions.get, cookie)
    if session is None:
        response = redirect("/sign-in?ended=1" if cookie else "/sign-in")
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response
    request.state.session = session
    return session


async def work(request: Request, session: Session, function: Callable, *args):
    """function(session's connection, *args) in a worker thread, one request at a time per session.

    The connection is opened again first when it broke or its password is due to be checked again
    (Sessions.connection), and once more when it breaks under function (the database restarted,
    the backend was terminated): every function here is one transaction, or reads, so running it
    again is safe, and a save that did commit meets its own version as a conflict. Raises
    SessionEnded (SessionLost) or DatabaseUnavailable (see Sessions.connection).
    """
    sessions = request.app.state.sessions
    token = request.cookies.get(SESSION_COOKIE, "")

    def locked():
        with session.lock:
            conn = sessions.connection(session, token)
            for again in (True, False):
                try:
                    return function(conn, *args)
                except psycopg.Error as error:
                    if not conn.broken:
                        raise
                    if not again:
                        raise DatabaseUnavailable(f"The connection to the database broke again ({str(error).strip()}).") from None
                sessions.reconnect(session, token)
                conn = session.conn

    return await run_in_threadpool(locked)
