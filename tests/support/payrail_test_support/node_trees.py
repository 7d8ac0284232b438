"""What PostgreSQL resolved an expression's operators and functions to, and with which argument
types they were written, read from its node trees: the stored ones (constraints, defaults,
indexes, triggers' conditions, views, SQL-standard function bodies: `conbin`, `adbin`, ...) and
those `debug_print_parse` logs for every statement a session parses (PL/pgSQL's included).

A tree is PostgreSQL's nodeToString() text (`{OPEXPR :opno 96 ... :args (...)}`), read here as
readfuncs.c's pg_strtok reads it. "As written" is what name lookup saw: an argument's type
before any implicit cast the parser added to fit the operator or function it chose, so an object
of exactly those argument types, planted in a schema on the path, is what would have been chosen
instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise

# nodes/primnodes.h, CoercionForm: what the parser added to make an argument fit.
IMPLICIT_CAST = "2"
# A cast written out, or a call of a type's function as a cast: found in pg_cast, never by name.
CAST_FORMATS = {"1", "2"}
UNKNOWN, TEXT = 705, 25


def tokens(text: str) -> Iterator[str]:
    """readfuncs.c's pg_strtok: (, ), {, } alone; anything else up to white space or one of
    them, a backslash escaping the next character."""
    for match in re.finditer(r"[(){}]|(?:\\.|[^\s(){}\\])+", text, re.DOTALL):
        yield match.group(0)


class Node(dict):
    """A node: its fields by name (":opno" is "opno"), and kind, its type name (OPEXPR)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind


def parse(text: str):
    """The first node of text, and the rest of the text after it."""
    stream = tokens(text)
    return _value(next(stream), stream)


def _value(token: str, stream: Iterator[str]):
    if token == "{":
        node = Node(next(stream))
        token = next(stream)
        while token != "}":
            field, values = token[1:], []
            token = next(stream)
            # A field's value is one token, node or list, but for a datum (":constvalue 4 [ 1 0 0 0 ]").
            while token != "}" and not token.startswith(":"):
                values.append(_value(token, stream))
                token = next(stream)
            node[field] = values[0] if len(values) == 1 else values
        return node
    if token == "(":
        items = []
        for token in stream:
            if token == ")":
                return items
            items.append(_value(token, stream))
    return None if token == "<>" else token


def walk(value) -> Iterator[Node]:
    if isinstance(value, Node):
        yield value
        for field in value.values():
            yield from walk(field)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


def written(node):
    """The argument as written: under any implicit cast the parser wrapped around it."""
    while isinstance(node, Node):
        if node.kind == "FUNCEXPR" and node["funcformat"] == IMPLICIT_CAST:
            node = node["args"][0]
        elif node.kind == "NAMEDARGEXPR" or (
            node.kind in ("RELABELTYPE", "COERCEVIAIO", "ARRAYCOERCEEXPR")
            and node.get({"RELABELTYPE": "relabelformat", "COERCEVIAIO": "coerceformat", "ARRAYCOERCEEXPR": "coerceformat"}[node.kind]) == IMPLICIT_CAST
        ):
            node = node["arg"]
        else:
            return node
    return node


# The field that holds a node's result type, by kind.
TYPE_FIELD = {
    "VAR": "vartype",
    "CONST": "consttype",
    "PARAM": "paramtype",
    "FUNCEXPR": "funcresulttype",
    "OPEXPR": "opresulttype",
    "DISTINCTEXPR": "opresulttype",
    "NULLIFEXPR": "opresulttype",
    "AGGREF": "aggtype",
    "WINDOWFUNC": "wintype",
    "RELABELTYPE": "resulttype",
    "COERCEVIAIO": "resulttype",
    "ARRAYCOERCEEXPR": "resulttype",
    "CASEEXPR": "casetype",
    "CASETESTEXPR": "typeId",
    "COALESCEEXPR": "coalescetype",
    "MINMAXEXPR": "minmaxtype",
    "ARRAYEXPR": "array_typeid",
    "ROWEXPR": "row_typeid",
    "SUBSCRIPTINGREF": "refrestype",
    "FIELDSELECT": "resulttype",
    "COERCETODOMAIN": "resulttype",
    "COERCETODOMAINVALUE": "typeId",
    "SQLVALUEFUNCTION": "type",
    "CONVERTROWTYPEEXPR": "resulttype",
    "SETTODEFAULT": "typeId",
    "CURRENTOFEXPR": None,
}
BOOLEAN_KINDS = {"BOOLEXPR", "SCALARARRAYOPEXPR", "ROWCOMPAREEXPR", "NULLTEST", "BOOLEANTEST"}


def type_of(node) -> int | None:
    """The type OID of an expression node; None where the tree does not say (a sublink's)."""
    if not isinstance(node, Node):
        return None
    if node.kind in BOOLEAN_KINDS:
        return 16
    if node.kind == "COLLATEEXPR":
        return type_of(node["arg"])
    if node.kind == "SUBLINK" and node["subLinkType"] == "4":  # EXPR_SUBLINK: its one column's
        targets = [t for t in node["subselect"]["targetList"] if t["resjunk"] == "false"]
        return type_of(targets[0]["expr"])
    field = TYPE_FIELD.get(node.kind)
    return int(node[field]) if field else None


@dataclass(frozen=True)
class Call:
    """One operator or function as an expression called it: kind "operator" (oid an operator) or
    "function" (a function, aggregate or window function), with the argument types as written
    (None: the tree does not say)."""

    kind: str
    oid: int
    arguments: tuple[int | None, ...]
    # The result's type where the call says it (polymorphic functions': the one resolved).
    result: int | None = None
    returns_set: bool = False


def calls(tree) -> Iterator[Call]:
    """Every operator and function a tree resolved by name, with its arguments as written."""

    def types(arguments) -> tuple[int | None, ...]:
        found = (type_of(written(a)) for a in arguments)
        return tuple(TEXT if t == UNKNOWN else t for t in found)

    for node in walk(tree):
        if node.kind in ("OPEXPR", "DISTINCTEXPR", "NULLIFEXPR"):
            # A NULLIF's result is its argument; the operator's is boolean.
            result = None if node.kind == "NULLIFEXPR" else int(node["opresulttype"])
            yield Call("operator", int(node["opno"]), types(node["args"]), result)
        elif node.kind == "SCALARARRAYOPEXPR":
            # x op ANY (array): the operator is looked up for x and the array's element type;
            # the array's own type is recorded, marked negative, for the caller to resolve.
            left, right = types(node["args"])
            yield Call("operator", int(node["opno"]), (left, -right if right else None))
        elif node.kind == "ROWCOMPAREEXPR":
            for opno, left, right in zip(node["opnos"][1:], node["largs"], node["rargs"], strict=True):
                yield Call("operator", int(opno), types([left, right]))
        elif node.kind == "FUNCEXPR" and node["funcformat"] not in CAST_FORMATS:
            returns_set = node["funcretset"] == "true"
            yield Call("function", int(node["funcid"]), types(node["args"] or []), int(node["funcresulttype"]), returns_set)
        elif node.kind == "AGGREF":
            yield Call("function", int(node["aggfnoid"]), types(t["expr"] for t in node["args"] or []), int(node["aggtype"]))
        elif node.kind == "WINDOWFUNC":
            yield Call("function", int(node["winfnoid"]), types(node["args"] or []), int(node["wintype"]))


# A message psql prints: "psql:FILE:LINE: LOG:  parse tree:" (or without the prefix), then the
# tree after "DETAIL:  ", then "CONTEXT:  " and the call stack, innermost first.
MESSAGE = re.compile(r"^(?:psql:[^\n]*?: )?LOG:  parse tree:\nDETAIL:  ", re.MULTILINE)
FRAME = re.compile(r'^(?:PL/pgSQL function ([^\s(]+)\(|SQL function "([^"]+)")', re.MULTILINE)


def logged_trees(stderr: str, wanted) -> Iterator[Node]:
    """The parse trees psql printed (debug_print_parse, client_min_messages = log) of the
    statements for which wanted(frame) is true: frame is the function the statement belongs to
    (the innermost PL/pgSQL or SQL function of the message's context, by the name it printed),
    None for a statement the session sent itself."""
    starts = [m.end() for m in MESSAGE.finditer(stderr)] + [len(stderr)]
    for start, end in pairwise(starts):
        message = stderr[start:end]
        frame = FRAME.search(message.partition("\nCONTEXT:  ")[2])
        if wanted((frame.group(1) or frame.group(2)) if frame else None):
            yield parse(message)
