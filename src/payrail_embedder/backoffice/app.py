"""The backoffice's routes. Each handler reads its request, calls one of actions' functions on the
session's connection, and renders a page; the rules are the database's and the write path's."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
from dataclasses import replace
from urllib.parse import urlencode

import psycopg
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..base import logs
from ..base.errors import database_reason
from ..embedders import made_once
from ..postgres.connection import DatabaseUnavailable
from ..postgres.local_server import embedded_stopped
from ..quality.restores import RestorePreview
from ..registry import bulk, sources
from ..registry.changes import Refused
from ..registry.history import differing
from ..registry.records import FIELD_LABELS, NEW_RECORD
from ..registry.stored import STATES, record_of
from ..settings import Settings
from . import actions
from .guard import Guard, allowed_hosts, origin_of
from .limits import BodyLimit, BodyTooLarge, in_words
from .sessions import Session, SessionEnded, SessionLimits, SessionLost, Sessions
from .sign_in import EMBEDDED_STOPPED, SignInRefused, SignInThrottle, open_connection, typed_problem
from .views import ListFilter, form_digest, last_seen, lines, record_from_form, record_name, restore_digest, saved_message
from .web import CSRF_FIELD, HERE, SESSION_COOKIE, SIGN_IN_COOKIE, redirect, render, same_token, set_cookie, sign_in_token, signed_in, signed_in_form, work


def _embedder(request: Request):
    return request.app.state.embedder


def _form_int(form: FormData, name: str) -> int | None:
    try:
        return int(str(form.get(name, "")))
    except ValueError:
        return None


def _incomplete(request: Request) -> Response:
    return render(request, "message.html", 400, title="Incomplete form", text="The form was incomplete: open the page again.")


async def home(request: Request) -> Response:
    return redirect("/records")


def _sign_in_form(request: Request, status_code: int = 200, username: str = "", problem: str | None = None) -> Response:
    token = sign_in_token(request)
    notices = {
        "ended": "Your session has ended (signed out elsewhere or from another browser's Sessions page, idle or open for too "
        "long, given way to a new sign-in of your role after it sat idle, or the backoffice restarted): sign in again.",
        "lost": "Your session has ended: PostgreSQL no longer accepts the password it was opened with (changed, or the "
        "role dropped, its grant revoked or its login taken away). Sign in again.",
        "signed_out": "You are signed out; your connection to the database is closed.",
    }
    notice = next((text for key, text in notices.items() if key in request.query_params), None)
    limits: SessionLimits = request.app.state.sessions.limits
    response = render(
        request,
        "sign_in.html",
        status_code,
        token=token,
        username=username,
        problem=problem,
        notice=notice,
        embedded=request.app.state.embedded,
        idle_minutes=round(limits.idle_timeout / 60),
        max_age_hours=f"{limits.max_age / 3600:g}",
    )
    set_cookie(request, response, SIGN_IN_COOKIE, token)
    return response


async def sign_in_page(request: Request) -> Response:
    if await run_in_threadpool(request.app.state.sessions.get, request.cookies.get(SESSION_COOKIE)):
        return redirect("/records")
    # A stopped embedded server is said before anyone types a password: its postmaster file tells,
    # with no connection. A configured server is not tried for an anonymous page view (an outsider
    # would make the backoffice open connections at will): a sign-in says it cannot reach it.
    settings: Settings = request.app.state.settings
    if request.app.state.embedded and embedded_stopped(settings.database_url, settings.data_dir):
        return _sign_in_form(request, 503, problem=EMBEDDED_STOPPED)
    return _sign_in_form(request)


async def sign_in(request: Request) -> Response:
    form = await request.form()
    username, password = str(form.get("username", "")), str(form.get("password", ""))
    if not same_token(form.get(CSRF_FIELD), request.cookies.get(SIGN_IN_COOKIE)):
        return _sign_in_form(request, 403, username, "The sign-in form had expired, or your browser did not send its cookie: sign in again.")
    if problem := typed_problem(username, password):
        logs.log("sign_in", logging.WARNING, role=username, outcome="failure", reason=problem)
        return _sign_in_form(request, 403, username, problem)
    throttle: SignInThrottle = request.app.state.throttle
    wait = throttle.begin(username)
    if wait:
        logs.log("sign_in_throttled", logging.WARNING, role=username, wait_seconds=math.ceil(wait))
        return _sign_in_form(request, 429, username, f'Too many failed sign-ins for "{username}": wait {math.ceil(wait)} seconds, then try again.')
    sessions: Sessions = request.app.state.sessions
    failed = False
    try:
        # Signing in again in the same browser ends the session it had (and closes its connection).
        earlier = await run_in_threadpool(sessions.get, request.cookies.get(SESSION_COOKIE))
        session, token = await run_in_threadpool(sessions.sign_in, username, password, earlier, request.headers.get("user-agent", ""))
    except SignInRefused as refused:
        failed = refused.failed
        logs.log("sign_in", logging.WARNING, role=username, outcome="failure", reason=refused.reason)
        return _sign_in_form(request, refused.status, username, str(refused))
    except DatabaseUnavailable as down:
        logs.log("sign_in", logging.WARNING, role=username, outcome="failure", reason=str(down))
        return _sign_in_form(request, 503, username, str(down))
    finally:
        throttle.end(username, failed=failed)
    logs.log("sign_in", role=username, outcome="success")
    response = redirect("/records")
    set_cookie(request, response, SESSION_COOKIE, token)
    response.delete_cookie(SIGN_IN_COOKIE, path="/")
    return response


@signed_in_form
async def sign_out(request: Request, session: Session, form: FormData) -> Response:
    await run_in_threadpool(request.app.state.sessions.end, session, "signed_out")
    response = redirect("/sign-in?signed_out=1")
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@signed_in
async def sessions_page(request: Request, session: Session) -> Response:
    sessions: Sessions = request.app.state.sessions
    listed = [(held, last_seen(idle)) for held, idle in sessions.of_role(session.role)]
    return render(request, "sessions.html", listed=listed, limits=sessions.limits)


@signed_in_form
async def end_session(request: Request, session: Session, form: FormData) -> Response:
    ended = await run_in_threadpool(request.app.state.sessions.end_others, session, str(form.get("session", "")))
    if ended:
        session.messages.append(("info", "Signed out that session: its browser is sent to sign in at its next request."))
    else:
        session.messages.append(("error", "Nothing was signed out: that session has ended already, or it is not another session of yours."))
    return redirect("/sessions")


@signed_in_form
async def end_other_sessions(request: Request, session: Session, form: FormData) -> Response:
    ended = await run_in_threadpool(request.app.state.sessions.end_others, session)
    text = f"Signed out {ended} other session{'s' if ended != 1 else ''}: this one stays." if ended else "There was no other session to sign out."
    session.messages.append(("info", text))
    return redirect("/sessions")


@signed_in
async def records(request: Request, session: Session) -> Response:
    params = request.query_params
    shown = ListFilter.of(params) or ListFilter()
    try:
        listed = await work(request, session, actions.records_list, shown, params.get("after"), params.get("before"))
    except ValueError:
        return render(request, "message.html", 400, title="No such page", text="That page link is not one the backoffice made: start from the first page.")
    # The filter, kept in the links to the pages before and after.
    pages = {
        direction: f"/records?{urlencode(shown.query() | {direction: cursor})}"
        for direction, cursor in (("before", listed.page.before), ("after", listed.page.after))
        if cursor
    }
    return render(request, "records.html", listed=listed, pages=pages, list_filter=shown, states=STATES)


# The most records one bulk action names by id: a page lists PAGE_SIZE; more goes by the filter.
# Below the form parser's 1,000 fields, so the limit is said in these words.
MOST_SELECTED = 500


def _record_ids(values: list) -> list[int] | None:
    """The record ids a form names (decimal, in bigint's range), or None when one is not an id."""
    ids = []
    for value in values:
        if not (isinstance(value, str) and value.isascii() and value.isdecimal() and len(value) <= 19 and 0 < int(value) < 2**63):
            return None
        ids.append(int(value))
    return ids


def _refused(request: Request, text: str) -> Response:
    return render(request, "message.html", 400, title="Refused", text=f"Refused: {text} Nothing was changed.")


def _bulk_request(params) -> tuple[str, ListFilter] | None:
    """The action ("enable" or "disable") and the list's filter a bulk request names, or None when one is not one of the list's."""
    action, asked = params.get("action"), ListFilter.of(params, strict=True)
    if action not in ("enable", "disable") or asked is None:
        return None
    return action, asked


def _bulk_page(request: Request, question: actions.BulkQuestion, action: str, asked: ListFilter, status_code: int = 200) -> Response:
    return render(request, "bulk.html", status_code, question=question, action=action, list_filter=asked)


# “All matching” acts under a filter only: every record is no slip of a click.
ALL_MATCHING_UNFILTERED = "“all matching” acts under a filter only: filter the list first."


@signed_in
async def confirm_bulk(request: Request, session: Session) -> Response:
    """The question before Enable / Disable of every record the list's filter matches: how many,
    which, what agents gain or lose. Its form carries the plan it shows."""
    asked = _bulk_request(request.query_params)
    if asked is None:
        return _incomplete(request)
    action, matching = asked
    if not matching.given:
        return _refused(request, ALL_MATCHING_UNFILTERED)
    question = await work(request, session, actions.bulk_question, matching.selection(), action == "enable")
    return _bulk_page(request, question, action, matching)


@signed_in_form
async def bulk_enable(request: Request, session: Session, form: FormData) -> Response:
    """Enable or Disable for the records ticked on the list, or, confirmed, for every record its filter matches."""
    asked, scope = _bulk_request(form), form.get("scope")
    if asked is None or scope not in ("selected", "matching"):
        return _incomplete(request)
    action, matching = asked
    back = redirect(matching.url())
    confirmed = None
    if scope == "matching":
        if not matching.given:
            return _refused(request, ALL_MATCHING_UNFILTERED)
        confirmed = form.get("plan")
        if not isinstance(confirmed, str) or not confirmed:
            return _incomplete(request)
        selection = matching.selection()
    else:
        ids = _record_ids(form.getlist("record"))
        if ids is None:
            return _refused(request, "the form named something that is not a record id.")
        if len(ids) > MOST_SELECTED:
            return _refused(request, f"at most {MOST_SELECTED:,} records can be ticked at once; filter the list and use “all matching” for more.")
        if not ids:
            session.messages.append(("error", "Nothing was changed: tick the records first."))
            return back
        selection = bulk.Selection.of_ids(ids)
    outcome = await work(request, session, actions.set_enabled, selection, action == "enable", confirmed)
    if outcome.asked_again is not None:
        return _bulk_page(request, outcome.asked_again, action, matching, 409)
    session.messages.append((outcome.kind, outcome.text))
    return back


@signed_in_form
async def undo_bulk(request: Request, session: Session, form: FormData) -> Response:
    """Undo of the operator's last bulk action: the one the list showed (its id in the form), or nothing."""
    action_id, shown = _record_ids([form.get("bulk_action")]), ListFilter.of(form, strict=True)
    if not action_id or shown is None:
        return _incomplete(request)
    session.messages.append(await work(request, session, actions.undo_last, _embedder(request), action_id[0]))
    return redirect(shown.url())


def _record_form(request: Request, status_code: int = 200, **context) -> Response:
    """The record page: the form (what the operator typed, or the record), what saving it changes
    (after a preview), Try a query, golden queries, history."""
    context = {
        "page": None,
        "trial": None,
        "query": "",
        "problem": None,
        "warning": None,
        "errors": {},
        "saved_now": None,
        "effect": None,
        "previewed": None,
        "golden_problem": None,
        "golden_query": "",
        "golden_also": "",
        "golden_language": "",
    } | context
    row = context["page"].row if context["page"] else None
    # Beside the version saved meanwhile, the fields where it and the operator's text differ are marked.
    differs = differing(context["record"], record_of(context["saved_now"])) if context["saved_now"] else []
    return render(request, "record.html", status_code, labels=FIELD_LABELS, row=row, differs=differs, **context)


@signed_in
async def new_record(request: Request, session: Session) -> Response:
    return _record_form(request, record=replace(NEW_RECORD, source=sources.BACKOFFICE), record_id=None, version=0)


async def _save(request: Request, session: Session, form: FormData, record_id: int | None, *, preview_only: bool = False) -> Response:
    """Saves the form (or, preview_only, shows what saving it would change). A save that changes
    some golden query's top three shows that first, unless the form is the one just previewed."""
    version = _form_int(form, "version")
    if version is None:
        return _incomplete(request)
    record = record_from_form(form)
    digest = form_digest(record, record_id, version)
    try:
        if preview_only:
            result = await work(request, session, actions.preview_record, _embedder(request), record, record_id, version)
        else:
            previewed = session.previews.get(digest) if form.get("previewed") == digest else None
            save = functools.partial(actions.save_record, previewed=previewed)
            result = await work(request, session, save, _embedder(request), record, record_id, version)
    except (DatabaseUnavailable, SessionEnded) as error:
        return _unsaved_form(request, error, record=record, record_id=record_id, version=version)
    if result.saved is not None:
        session.previews.pop(digest, None)
        session.messages.append(("info", saved_message(result.saved)))
        return redirect(f"/records/{result.saved.record_id}")
    page = await work(request, session, actions.record_page, record_id, _embedder(request)) if record_id is not None else None
    if result.preview is not None:
        session.remember_preview(digest, result.preview)
        changes = result.preview.effect.changes
        warning = None
        if not preview_only:
            warning = (
                f"Not saved yet: this edit changes the top three of {len(changes)} golden "
                f"{'query' if len(changes) == 1 else 'queries'} (below). Save again to save it as it is."
            )
        return _record_form(
            request, record=record, record_id=record_id, version=version, page=page, effect=result.preview.effect, previewed=digest, warning=warning
        )
    if result.conflict:
        # The form now stands for the version saved meanwhile: saving it again replaces that
        # version with the operator's (merged) text. A record deleted meanwhile is saved anew.
        record_id, version = (record_id, page.row["version"]) if page else (None, 0)
    return _record_form(
        request,
        409 if result.conflict else 422,
        record=record,
        record_id=record_id,
        version=version,
        page=page,
        problem=result.problem,
        errors=result.field_errors,
        saved_now=result.row if result.conflict else None,
    )


def _unsaved_form(request: Request, error: Exception, **form) -> Response:
    """The form with what the operator typed, when the database could not take the save: it is
    down (the session stays: Save again), or the session ended (copy the text, sign in again)."""
    if isinstance(error, DatabaseUnavailable):
        problem = f"Not saved. {error} Your text is below, unchanged: Save again once the database is back."
        return _record_form(request, 503, problem=problem, **form)
    request.state.session = None
    why = f"PostgreSQL no longer accepts the password it was opened with ({error})" if isinstance(error, SessionLost) else "it was ended meanwhile"
    problem = f"Not saved: your session has ended, because {why}. Your text is below: copy what you need, then sign in again."
    response = _record_form(request, 401, problem=problem, **form)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@signed_in_form
async def create_record(request: Request, session: Session, form: FormData) -> Response:
    return await _save(request, session, form, None)


@signed_in_form
async def save_record(request: Request, session: Session, form: FormData) -> Response:
    return await _save(request, session, form, request.path_params["record_id"])


@signed_in_form
async def preview_new_record(request: Request, session: Session, form: FormData) -> Response:
    return await _save(request, session, form, None, preview_only=True)


@signed_in_form
async def preview_record(request: Request, session: Session, form: FormData) -> Response:
    return await _save(request, session, form, request.path_params["record_id"], preview_only=True)


async def _stored_page(request: Request, session: Session, *, with_golden: bool = False) -> actions.RecordPage | Response:
    """The record of the request's path with its history (and its golden queries, ranked), or the
    page saying there is none."""
    record_id = request.path_params["record_id"]
    page = await work(request, session, actions.record_page, record_id, _embedder(request) if with_golden else None)
    return _no_such_record(request, record_id) if page is None else page


def _no_such_record(request: Request, record_id: int) -> Response:
    return render(
        request,
        "message.html",
        404,
        title="No such record",
        text=f"There is no record {record_id}: it was deleted, or never existed.",
    )


@signed_in
async def record(request: Request, session: Session) -> Response:
    return await _record_page(request, session)


async def _record_page(request: Request, session: Session, status_code: int = 200, **context) -> Response:
    """The stored record's page, as GET shows it, with context's additions (a refused golden query)."""
    page = await _stored_page(request, session, with_golden=True)
    if isinstance(page, Response):
        return page
    query = request.query_params.get("query")
    trial = await work(request, session, actions.try_query, _embedder(request), page.row, query) if query else None
    return _record_form(
        request,
        status_code,
        record=record_of(page.row),
        record_id=page.row["id"],
        version=page.row["version"],
        page=page,
        trial=trial,
        query=query or "",
        **context,
    )


@signed_in_form
async def add_golden_query(request: Request, session: Session, form: FormData) -> Response:
    record_id = request.path_params["record_id"]
    query, also = str(form.get("query", "")).replace("\r\n", "\n"), str(form.get("also", "")).replace("\r\n", "\n")
    language = str(form.get("language", "")).strip()
    problem = await work(request, session, actions.add_golden, _embedder(request), record_id, query, lines(also), language or None)
    if problem is None:
        session.messages.append(("info", f'Added the golden query "{query}".'))
        return redirect(f"/records/{record_id}")
    # The form again, with what was typed and why it was not added.
    return await _record_page(request, session, 422, golden_problem=problem, golden_query=query, golden_also=also, golden_language=language)


@signed_in_form
async def remove_golden_query(request: Request, session: Session, form: FormData) -> Response:
    record_id = request.path_params["record_id"]
    query = str(form.get("query", ""))
    problem = await work(request, session, actions.remove_golden, record_id, query)
    session.messages.append(("error", problem) if problem else ("info", f'Removed the golden query "{query}".'))
    return redirect(f"/records/{record_id}")


@signed_in
async def quality_page(request: Request, session: Session) -> Response:
    report, problem = await work(request, session, actions.quality_report, _embedder(request))
    advice_counts = await work(request, session, actions.advice_counts)
    return render(request, "quality.html", 503 if problem else 200, report=report, problem=problem, advice_counts=advice_counts)


@signed_in
async def advice_page(request: Request, session: Session) -> Response:
    """The records that get one piece of advice on the editorial template, a page at a time."""
    number = request.query_params.get("page", "1")
    if not (number.isascii() and number.isdecimal() and 0 < len(number) <= 9 and int(number) > 0):
        return render(request, "message.html", 400, title="No such page", text="That page number is not one the backoffice made: start from the first page.")
    page = await work(request, session, actions.advised_page, request.path_params["code"], int(number))
    if page is None:
        return render(
            request, "message.html", 404, title="No such advice", text="The backoffice gives no advice of that name: the Quality page lists every piece."
        )
    return render(request, "advice.html", page=page)


@signed_in_form
async def restore(request: Request, session: Session, form: FormData) -> Response:
    """A history entry's Restore: its confirmation page first (what restoring changes, measured
    as an edit's preview is, saving nothing); that page's Restore (the form it carries: the same
    entry, the version it measured) restores it, or asks again when the record changed since."""
    record_id = request.path_params["record_id"]
    history_id, version = _form_int(form, "history_id"), _form_int(form, "version")
    if history_id is None or version is None:
        return _incomplete(request)
    digest = restore_digest(record_id, history_id, version)
    if form.get("previewed") == digest:
        previewed = session.previews.pop(digest, None)
        embedding = previewed.embedding if isinstance(previewed, RestorePreview) else None
        outcome = await work(request, session, actions.restore, _embedder(request), record_id, history_id, version, embedding)
        asked = outcome.asked_again
    else:
        asked = await work(request, session, actions.restore_question, _embedder(request), record_id, history_id, version)
        outcome = asked if isinstance(asked, actions.RestoreOutcome) else None
    if isinstance(asked, actions.RestoreQuestion):
        shown = restore_digest(record_id, history_id, asked.version)
        session.remember_preview(shown, asked.preview)
        return render(request, "restore.html", 409 if outcome else 200, question=asked, record_id=record_id, history_id=history_id, previewed=shown)
    assert outcome is not None
    session.messages.append((outcome.kind, outcome.text))
    # The record restored (a new one when it was deleted meanwhile), or the list when there is none.
    return redirect(f"/records/{outcome.shown}" if outcome.shown is not None else "/records")


def _delete_page(request: Request, row: dict, status_code: int = 200, problem: str | None = None, golden: list | None = None) -> Response:
    return render(request, "delete.html", status_code, row=row, problem=problem, golden=golden or [])


@signed_in
async def confirm_delete(request: Request, session: Session) -> Response:
    page = await _stored_page(request, session)
    if isinstance(page, Response):
        return page
    return _delete_page(request, page.row, golden=await work(request, session, actions.golden_queries_of, page.row["id"]))


@signed_in_form
async def delete(request: Request, session: Session, form: FormData) -> Response:
    record_id = request.path_params["record_id"]
    version = _form_int(form, "version")
    if version is None:
        return _incomplete(request)
    with_golden = "with_golden_queries" in form
    row, refusal = await work(request, session, actions.delete, record_id, version, with_golden)
    if refusal is None:
        session.messages.append(
            ("info", f'Deleted "{record_name(row)}"{" and its golden queries" if with_golden else ""}. The history keeps its last version.')
        )
        return redirect("/records")
    if row is None:  # deleted meanwhile
        return _no_such_record(request, record_id)
    golden = await work(request, session, actions.golden_queries_of, record_id)
    if isinstance(refusal, Refused):  # golden queries name it
        problem = f"Not deleted: {refusal.reason}. Tick “Delete it from its golden queries too” to delete it with them."
        return _delete_page(request, row, 409, problem, golden)
    return _delete_page(request, row, 409, f"Not deleted: {refusal.reason}. Look at the record again before deleting it.", golden)


@signed_in
async def import_page(request: Request, session: Session) -> Response:
    return render(request, "import.html", report=None, problem=None)


@signed_in_form
async def import_catalog(request: Request, session: Session, form: FormData) -> Response:
    upload = form.get("file")
    if not isinstance(upload, UploadFile) or not upload.filename:
        return render(request, "import.html", 422, report=None, problem="Choose a JSON Lines file to import.")
    data = await upload.read()
    source = str(form.get("source", "")).strip(" \t") or None
    report, problem = await work(request, session, actions.import_upload, _embedder(request), data, upload.filename, "skip_invalid" in form, source)
    ok = report is not None and not report.refused
    return render(request, "import.html", 200 if ok else 422, report=report, problem=problem)


@signed_in
async def export(request: Request, session: Session) -> Response:
    data = await work(request, session, actions.export)
    return Response(
        data,
        media_type="application/x-ndjson",
        headers={"content-disposition": 'attachment; filename="payrail-catalog.jsonl"'},
    )


# Starlette calls an exception handler with the exception it was registered for, typed as any
# Exception: each narrows it, as Starlette's own handlers do.
async def session_ended(request: Request, error: Exception) -> Response:
    assert isinstance(error, SessionEnded)
    response = redirect("/sign-in?lost=1" if isinstance(error, SessionLost) else "/sign-in?ended=1")
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


async def database_unavailable(request: Request, error: Exception) -> Response:
    assert isinstance(error, DatabaseUnavailable)
    text = f"{error} Your session is kept: try again in a moment."
    return render(request, "message.html", 503, title="The database cannot be reached", text=text)


async def body_too_large(request: Request, error: Exception) -> Response:
    assert isinstance(error, BodyTooLarge)
    await error.drain()  # a browser shows the answer only once it has sent its request
    limit = in_words(error.limit)
    if request.url.path == "/import" and getattr(request.state, "session", None) is not None:
        problem = (
            f"Not imported: the file is larger than the backoffice takes ({limit} at most, set by --max-upload-mb). "
            "Nothing was saved. Import a larger catalog with `payrail-embedder import FILE`."
        )
        return render(request, "import.html", 413, report=None, problem=problem)
    text = f"Refused: the request is larger than the backoffice takes here ({limit} at most). Nothing was saved."
    return render(request, "message.html", 413, title="Too large", text=text)


async def database_failed(request: Request, error: Exception) -> Response:
    assert isinstance(error, psycopg.Error)
    settings: Settings = request.app.state.settings
    reason = embedded_stopped(settings.database_url, settings.data_dir) or database_reason(error)
    return render(request, "message.html", 500, title="The database failed", text=f"The database failed: {reason}")


@contextlib.asynccontextmanager
async def ending_sessions(app: Starlette):
    """While the backoffice serves, sessions past their idle or age limit are ended every minute
    (or sooner, for shorter limits); when it stops, every session is ended."""
    sessions: Sessions = app.state.sessions

    async def end_expired_sessions():
        while True:
            await asyncio.sleep(min(60.0, sessions.limits.idle_timeout, sessions.limits.max_age))
            await run_in_threadpool(sessions.end_expired)

    sweeper = asyncio.create_task(end_expired_sessions())
    try:
        yield
    finally:
        sweeper.cancel()
        await run_in_threadpool(sessions.end_all)


ROUTES = [
    Route("/", home),
    Route("/sign-in", sign_in_page, methods=["GET"]),
    Route("/sign-in", sign_in, methods=["POST"]),
    Route("/sign-out", sign_out, methods=["POST"]),
    Route("/sessions", sessions_page, methods=["GET"]),
    Route("/sessions/end", end_session, methods=["POST"]),
    Route("/sessions/end-others", end_other_sessions, methods=["POST"]),
    Route("/records", records),
    Route("/records/bulk", confirm_bulk, methods=["GET"]),
    Route("/records/bulk", bulk_enable, methods=["POST"]),
    Route("/records/bulk/undo", undo_bulk, methods=["POST"]),
    Route("/records/new", new_record, methods=["GET"]),
    Route("/records/new", create_record, methods=["POST"]),
    Route("/records/{record_id:int}", record, methods=["GET"]),
    Route("/records/{record_id:int}", save_record, methods=["POST"]),
    Route("/records/{record_id:int}/restore", restore, methods=["POST"]),
    Route("/records/{record_id:int}/delete", confirm_delete, methods=["GET"]),
    Route("/records/{record_id:int}/delete", delete, methods=["POST"]),
    Route("/records/new/preview", preview_new_record, methods=["POST"]),
    Route("/records/{record_id:int}/preview", preview_record, methods=["POST"]),
    Route("/records/{record_id:int}/golden", add_golden_query, methods=["POST"]),
    Route("/records/{record_id:int}/golden/remove", remove_golden_query, methods=["POST"]),
    Route("/quality", quality_page, methods=["GET"]),
    Route("/advice/{code}", advice_page, methods=["GET"]),
    Route("/import", import_page, methods=["GET"]),
    Route("/import", import_catalog, methods=["POST"]),
    Route("/export", export),
    Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
]


def create_app(
    settings: Settings,
    *,
    limits: SessionLimits,
    upload_limit: int,
    bind_host: str = "127.0.0.1",
    public_url: str | None = None,
) -> Starlette:
    """The backoffice for the registry settings configure; settings.resolved_database_url is
    where operators sign in (their role and password replace the URL's). limits: how long sessions
    live and how many it holds; upload_limit: the largest import upload, in bytes. bind_host: the
    address it is served on; public_url: where browsers reach it behind a reverse proxy, if they do."""

    app = Starlette(
        routes=ROUTES,
        middleware=[
            # Compressed when the browser asks. Safe from BREACH-style guessing of the tokens a page
            # carries: the session cookie is SameSite=Strict, so another site's requests get none.
            Middleware(GZipMiddleware, minimum_size=1000),
            Middleware(Guard, hosts=allowed_hosts(bind_host, public_url), public_origin=public_url and origin_of(public_url)),
            Middleware(BodyLimit, upload_limit=upload_limit),
        ],
        exception_handlers={
            SessionEnded: session_ended,
            DatabaseUnavailable: database_unavailable,
            BodyTooLarge: body_too_large,
            psycopg.Error: database_failed,
        },
        lifespan=ending_sessions,
    )
    app.state.settings = settings
    app.state.database_url = settings.resolved_database_url
    app.state.embedded = settings.database_url is None
    app.state.embedder = made_once(settings.embedder)  # one embedder for the whole backoffice
    app.state.sessions = Sessions(
        functools.partial(open_connection, app.state.database_url, embedded=app.state.embedded, prepared_statements=settings.prepared_statements),
        limits,
    )
    app.state.throttle = SignInThrottle()
    app.state.secure_cookies = (public_url or "").startswith("https:")
    return app
