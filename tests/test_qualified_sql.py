"""Every operator and function db/ calls is named by its schema, so that nothing planted in a
schema on the registry's search path can stand in for it (db/CONVENTIONS.md).

The registry's functions run on `pg_catalog, payrail, <pgvector's schema>`. PostgreSQL picks, among
every operator or function of the name on the path, the one whose argument types match the call
exactly, wherever on the path it is: `integer * double precision` has no such built-in, so an
object of exactly those types planted in pgvector's schema (public, on many servers, which a DBA
may open to others) would run instead, as whoever calls. A name qualified by its schema
(`operator(pg_catalog.*)`, `pg_catalog.sqrt(...)`) is looked up in that schema alone.

pgvector's own names stay bare, since its schema differs from server to server: its operators
and functions that pg_catalog has no namesake for, which the registry calls with pgvector's exact
types (a call that needed a cast would let a planted object of the written types win; the
planted-twins test, tests/test_planted_twins.py, shows none does). Comparisons of pgvector's
types use its functions (`vector_ne(a, b)`), not `=` or `<>`, which only its types tell apart
from the built-ins'.

Read from db/'s text with PostgreSQL's own parser (pglast): every statement, PL/pgSQL body and
DO block, and the SQL the files hand to helpers in strings (constraints, triggers, views).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pglast
import psycopg
import pytest
from pglast import ast, enums, visitors

from payrail_test_support import REPO

DB = REPO / "db"
# Names of pgvector's functions and operators that no built-in has: they may stay unqualified.
PGVECTOR_ONLY = """
select o.oprname::text from pg_catalog.pg_operator as o
where o.oid in (select d.objid from pg_catalog.pg_depend as d join pg_catalog.pg_extension as e on e.oid = d.refobjid
                where e.extname = 'vector' and d.deptype = 'e' and d.classid = 'pg_catalog.pg_operator'::pg_catalog.regclass)
  and o.oprname not in (select oprname from pg_catalog.pg_operator where oprnamespace = 'pg_catalog'::pg_catalog.regnamespace)
union
select p.proname::text from pg_catalog.pg_proc as p
where p.oid in (select d.objid from pg_catalog.pg_depend as d join pg_catalog.pg_extension as e on e.oid = d.refobjid
                where e.extname = 'vector' and d.deptype = 'e' and d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass)
  and p.proname not in (select proname from pg_catalog.pg_proc where pronamespace = 'pg_catalog'::pg_catalog.regnamespace)
"""
# The schemas a qualified function may name: the built-ins' and the registry's own.
FUNCTION_SCHEMAS = {"pg_catalog", "payrail"}
# Constructs that compare with "=" (or order with < and >) found on the search path, which SQL
# gives no place to qualify: each has a spelling with operator(pg_catalog.=).
UNQUALIFIABLE = {
    enums.A_Expr_Kind.AEXPR_DISTINCT: "IS DISTINCT FROM",
    enums.A_Expr_Kind.AEXPR_NOT_DISTINCT: "IS NOT DISTINCT FROM",
    enums.A_Expr_Kind.AEXPR_NULLIF: "NULLIF",
    enums.A_Expr_Kind.AEXPR_IN: "IN (...)",
    enums.A_Expr_Kind.AEXPR_LIKE: "LIKE",
    enums.A_Expr_Kind.AEXPR_ILIKE: "ILIKE",
    enums.A_Expr_Kind.AEXPR_SIMILAR: "SIMILAR TO",
    enums.A_Expr_Kind.AEXPR_BETWEEN: "BETWEEN",
    enums.A_Expr_Kind.AEXPR_NOT_BETWEEN: "NOT BETWEEN",
    enums.A_Expr_Kind.AEXPR_BETWEEN_SYM: "BETWEEN SYMMETRIC",
    enums.A_Expr_Kind.AEXPR_NOT_BETWEEN_SYM: "NOT BETWEEN SYMMETRIC",
}
# A string that holds SQL the file runs (through a helper or EXECUTE): parsed and checked too.
SQL_IN_STRING = re.compile(r"\s*(check\s*\(|select\s|with\s|create\s)", re.IGNORECASE)
FORMAT_PLACEHOLDER = re.compile(r"%(\d+\$)?[IsL]")
QUALIFIED_OPERATOR = re.compile(r"operator\(pg_catalog\.([^)\s]+)\)", re.IGNORECASE)
# Where a node was written, not what it means.
LOCATIONS = {"location", "stmt_location", "stmt_len", "rexpr_list_start", "rexpr_list_end", "list_start", "list_end"}


@dataclass(frozen=True)
class Problem:
    where: str
    what: str
    text: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}: {self.text}"


def names(nodes) -> list[str]:
    return [n.sval for n in nodes or ()]


class Finder(visitors.Visitor):
    """The calls in one parsed statement that a name on the search path could stand in for."""

    def __init__(self, text: str, bare: set[str]) -> None:
        super().__init__()
        self.text, self.bare, self.found = text, bare, []

    def report(self, what: str, location: int | None) -> None:
        start = max(0, location or 0)
        self.found.append((what, " ".join(self.text[start : start + 70].split())))

    def operator(self, name: list[str], location) -> None:
        if name == ["pg_catalog", name[-1]] or (len(name) == 1 and name[0] in self.bare):
            return
        if len(name) == 1:
            self.report(f"operator {name[0]} is found on the search path: write operator(pg_catalog.{name[0]})", location)
        else:
            self.report(f"operator of schema {name[0]}: only pg_catalog's are named by schema (pgvector's schema varies)", location)

    def visit_A_Expr(self, parent, node):
        if node.kind in UNQUALIFIABLE:
            if "__Case__Variable_" in self.text:
                self.report("PL/pgSQL's CASE x WHEN compares with = found on the search path: write CASE WHEN x operator(pg_catalog.=) ...", node.location)
            else:
                self.report(
                    f"{UNQUALIFIABLE[node.kind]} compares with an operator found on the search path: spell it with operator(pg_catalog.=)", node.location
                )
        else:
            self.operator(names(node.name), node.location)

    def visit_SubLink(self, parent, node):
        if node.operName:
            self.operator(names(node.operName), node.location)
        elif node.subLinkType == enums.SubLinkType.ANY_SUBLINK:
            self.report("IN (select ...) compares with = found on the search path: write operator(pg_catalog.=) any (select ...)", node.location)

    def visit_SortBy(self, parent, node):
        if node.useOp:
            self.operator(names(node.useOp), node.location)

    def visit_CaseExpr(self, parent, node):
        if node.arg is not None:
            self.report("CASE x WHEN compares with = found on the search path: write CASE WHEN x operator(pg_catalog.=) ...", node.location)

    def visit_FuncCall(self, parent, node):
        name = names(node.funcname)
        if len(name) == 1 and name[0] not in self.bare:
            self.report(f"function {name[0]}() is found on the search path: write pg_catalog.{name[0]}() or payrail.{name[0]}()", node.location)
        elif len(name) == 2 and name[0] not in FUNCTION_SCHEMAS:
            self.report(f"function of schema {name[0]}: only pg_catalog's and payrail's are named by schema", node.location)

    def visit_A_Const(self, parent, node):
        value = getattr(node.val, "sval", None) if node.val is not None else None
        if isinstance(value, str) and SQL_IN_STRING.match(value):
            self.found.append(("sql in a string", value))


def meaning(node):
    """A parse tree without where its nodes were written, and with every operator named as if
    unqualified, in strings too: two statements that differ only in that mean the same."""
    if isinstance(node, ast.Node):
        fields = {"node": type(node).__name__}
        for field in node:
            value = getattr(node, field)
            if field in LOCATIONS or field.endswith("_location"):
                continue
            if field in ("name", "operName", "useOp") and isinstance(value, tuple) and all(isinstance(n, ast.String) for n in value):
                fields[field] = names(value)[-1:]
            elif isinstance(node, ast.String):
                fields[field] = QUALIFIED_OPERATOR.sub(r"\1", value)
            else:
                fields[field] = meaning(value)
        return fields
    if isinstance(node, (list, tuple)):
        return [meaning(item) for item in node]
    return node


def check_sql(text: str, where: str, bare: set[str]) -> list[Problem]:
    """The problems of every statement of text, and of the code inside it."""
    problems = []
    # operator(...) takes the precedence of "any other operator", below * and + and above the
    # comparisons: what the text means must be what it would mean with each operator unqualified.
    unqualified = pglast.parse_sql(QUALIFIED_OPERATOR.sub(r"\1", text))
    for raw, plain in zip(pglast.parse_sql(text), unqualified):
        if meaning(raw.stmt) != meaning(plain.stmt):
            problems.append(
                Problem(
                    where,
                    "operator(...) binds as any other operator does, not as its own: parenthesize",
                    " ".join(text[raw.stmt_location : raw.stmt_location + (raw.stmt_len or len(text))].split())[:300],
                )
            )
        finder = Finder(text, bare)
        finder(raw.stmt)
        for what, found in finder.found:
            if what == "sql in a string":
                problems += check_string(found, where, bare)
            else:
                problems.append(Problem(where, what, found))
        statement = raw.stmt
        end = raw.stmt_location + raw.stmt_len if raw.stmt_len else len(text)
        if isinstance(statement, ast.CreateFunctionStmt):
            options = {option.defname: option.arg for option in statement.options}
            name = ".".join(names(statement.funcname))
            language = options["language"].sval
            if built_ins_only(options.get("set")):
                continue  # its body, parsed when it runs, finds nothing outside pg_catalog
            if language == "plpgsql":
                problems += check_plpgsql(text[raw.stmt_location : end], f"{where} {name}", bare)
            elif language == "sql" and "as" in options:
                body = options["as"]
                problems += check_sql((body[0] if isinstance(body, tuple) else body).sval, f"{where} {name}", bare)
        elif isinstance(statement, ast.DoStmt):
            code = next(option.arg.sval for option in statement.args if option.defname == "as")
            problems += check_plpgsql(f"create function do_block() returns void language plpgsql as $do$ {code} $do$", f"{where} DO block", bare)
    return problems


def built_ins_only(setting) -> bool:
    """Whether a function's SET clause pins its search path to pg_catalog (and pg_temp) alone."""
    if not isinstance(setting, ast.VariableSetStmt) or setting.name != "search_path" or setting.kind != enums.VariableSetKind.VAR_SET_VALUE:
        return False
    return {argument.val.sval for argument in setting.args} <= {"pg_catalog", "pg_temp"}


def check_string(text: str, where: str, bare: set[str]) -> list[Problem]:
    statement = FORMAT_PLACEHOLDER.sub("x", text)
    if re.match(r"\s*check\s*\(", statement, re.IGNORECASE):
        statement = f"alter table x add constraint x {statement}"
    try:
        return check_sql(statement, f"{where} (SQL in a string)", bare)
    except pglast.parser.ParseError as error:
        if FORMAT_PLACEHOLDER.search(text):
            return []  # a format() template of SQL pieces, each checked where it is written
        return [Problem(where, f"a string that looks like SQL does not parse ({error})", text)]


def plpgsql_expressions(tree):
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key == "PLpgSQL_expr":
                yield value["query"], value.get("parseMode", 0)
            else:
                yield from plpgsql_expressions(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from plpgsql_expressions(value)


def check_plpgsql(create: str, where: str, bare: set[str]) -> list[Problem]:
    """Every expression and statement of a PL/pgSQL function (or DO block) as PL/pgSQL hands it
    to the SQL parser. pglast's PL/pgSQL parser resolves a qualified type only in pg_catalog and
    public: payrail's are read as public's, which changes no name it checks; an array of one of
    them or of pgvector's (whose arrays it reads as record[] and refuses) is read as text[], which
    changes none either."""
    code = re.sub(r"--[^\n]*", "", create)
    problems = [Problem(where, "names schema public, which pglast reads payrail's types as", create)] if "public." in code else []
    readable = re.sub(r"\b(payrail\.\w+|vector|halfvec)\[\]", "text[]", create)
    for query, mode in plpgsql_expressions(pglast.parse_plpgsql(re.sub(r"\bpayrail\.", "public.", readable))):
        query = query.replace("public.", "payrail.")
        # 0: a statement; 2: an expression; 3-5: an assignment, "target := expression".
        statement = query if mode == 0 else "select " + (re.split(r":=|=", query, maxsplit=1)[1] if mode >= 3 else query)
        problems += check_sql(statement, where, bare)
    return problems


def db_files() -> list[Path]:
    return sorted(path for folder in ("schema", "upgrades", "functions") for path in (DB / folder).glob("*.sql"))


@pytest.fixture
def pgvector_only(database_url) -> set[str]:
    with psycopg.connect(database_url) as conn:
        return {name for (name,) in conn.execute(PGVECTOR_ONLY)}


def test_every_operator_and_function_db_calls_is_named_by_its_schema_or_is_pgvectors_own(pgvector_only):
    assert {"<=>", "<#>", "l2_normalize", "vector_norm", "vector_dims", "vector_ne"} <= pgvector_only
    assert not pgvector_only & {"=", "<>", "+", "*", "sum", "avg"}, "a built-in's name would pass unqualified"
    problems = [problem for path in db_files() for problem in check_sql(path.read_text(encoding="utf-8"), path.relative_to(DB).as_posix(), pgvector_only)]
    assert problems == [], "\n".join(map(str, problems))


def test_the_check_finds_each_way_a_name_escapes_its_schema():
    text = """
        create function payrail.f(p_a integer, p_b double precision) returns boolean language plpgsql
        stable security invoker set search_path from current as $$
        declare v double precision := p_a * p_b;
        begin
          case p_a when 1 then return p_a operator(pg_catalog.=) 1; end case;
          return p_a in (1, 2) or p_a between 1 and 2 or nullif(p_a, 0) is null or p_a is distinct from 3
            or 'x' like 'y' or p_a = any (select 1) or p_a in (select 2) or now() is null or extensions.g(1) or pg_catalog.sqrt(p_b) > 1
            or l2_normalize(null::vector) <=> null or null::vector operator(extensions.<>) null::vector;
        end $$;
        do $$ begin perform count(*) from payrail.t order by x using <; end $$;
        select payrail._ensure_check_constraint('payrail.t', 'c', 'check (a + 1 operator(pg_catalog.>) 0)');
        create view payrail.v as select case x when 1 then 2 end from payrail.t;
        create function payrail.h(p double precision) returns double precision language sql immutable security invoker
        set search_path = pg_catalog, pg_temp as $$ select 2 * sqrt(p) $$;
        create function payrail.k(p double precision) returns double precision language sql immutable security invoker
        set search_path = pg_catalog, pg_temp return 2 / p;
        select 1 operator(pg_catalog.+) 2 operator(pg_catalog.*) 3, 1 operator(pg_catalog.+) (2 operator(pg_catalog.*) 3);
    """
    found = sorted(" ".join(problem.what.split(" ")[:2]) for problem in check_sql(text, "test", {"<=>", "l2_normalize"}))
    assert found == sorted(
        [
            "operator *",
            "PL/pgSQL's CASE",
            "IN (...)",
            "BETWEEN compares",
            "NULLIF compares",
            "IS DISTINCT",
            "LIKE compares",
            "operator =",
            "function now()",
            "function of",
            "operator >",
            "operator of",
            "function count()",
            "operator <",
            "operator +",
            "CASE x",
            "IN (select",
            "operator /",
            "operator(...) binds",
        ]
    ), found
