"""Where bash evaluates a value as code: arithmetic and array subscripts.

bash evaluates a variable's *value* as an arithmetic expression wherever it does arithmetic —
``$((v))``, ``((v))``, ``let``, ``[[ v -eq 1 ]]``, ``${x:v}``, ``${a[v]}``, the index of
``a[v]=1``, variables declared ``-i`` — and inside that evaluation an array subscript is expanded,
command substitution included. So ``v='a[$(rm -f victim)]'; echo $((v))`` runs ``rm`` although
no command line shows it. Names used as variables by name (``printf -v NAME``, ``read NAME``,
``unset -v NAME``, ``[[ -v NAME ]]``, ``${!ref}``) evaluate a subscript written in NAME the same
way.

A value is safe there when it is known to be a number: every assignment to the name in the command
line is an integer literal or the result of arithmetic (``n=$((n+1))``, ``((i++))``, ``let``:
evaluating the expression is checked where it happens, and what it stores is a number), or the
name is never assigned in the line at all (its value comes from the sandbox's environment, which
the operator sets). Anything else — a string literal, a command's output, ``read``, a loop over
computed words, a positional parameter — can carry a subscript with code, and :func:`hazards`
names it; the parser then treats the command line as one that cannot be known.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from policies.shell_words import node_text

if TYPE_CHECKING:
    from tree_sitter import Node

__all__ = ["hazards"]

_INT = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|[0-9]+)$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CODE_IN_TEXT = re.compile(r"[$`]")
_NAMES_IN_TEXT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Variables bash fills from data the command line controls (matches, input, arguments, dirs).
_DATA_FED = frozenset({"BASH_REMATCH", "DIRSTACK", "BASH_ARGV", "BASH_COMMAND", "BASH_EXECUTION_STRING",
                       "REPLY", "MAPFILE", "OPTARG", "PWD", "OLDPWD", "COMP_WORDS", "COMP_LINE",
                       "READLINE_LINE", "FUNCNAME", "BASH_SOURCE", "@", "*", "0", "1", "2", "3",
                       "4", "5", "6", "7", "8", "9"})
_ARITH_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_READERS = {"read": "adeinNptu", "mapfile": "dnOstuC", "readarray": "dnOstuC"}


def _walk(node: Node) -> Iterator[Node]:
    yield node
    for child in node.named_children:
        yield from _walk(child)


def _tokens(node: Node) -> list[str]:
    return [c.type for c in node.children if not c.is_named]


def _is_int_value(node: Node | None) -> bool:
    if node is None:
        return False
    if node.type == "number":
        return True
    if node.type in ("word", "raw_string", "string"):
        return bool(_INT.match(node_text(node).strip("'\"")))
    return False


def _command_name(node: Node) -> str:
    name = node.child_by_field_name("name")
    return node_text(name) if name is not None else ""


def _args(node: Node) -> list[Node]:
    return [c for c in node.named_children if c.type not in ("command_name", "variable_assignment",
                                                               "file_redirect", "herestring_redirect")]


def _in_arithmetic(node: Node) -> bool:
    """Is ``node`` inside an arithmetic context (where ``=`` assigns rather than compares)?"""
    parent = node.parent
    while parent is not None:
        if parent.type in ("arithmetic_expansion", "c_style_for_statement") or (
                parent.type == "compound_statement" and "((" in _tokens(parent)):
            return True
        if parent.type in ("command", "test_command", "program"):
            return False
        parent = parent.parent
    return False


def _in_double_brackets(node: Node) -> bool:
    parent = node.parent
    while parent is not None:
        if parent.type == "test_command":
            return "[[" in _tokens(parent)
        parent = parent.parent
    return False


class _Taint:
    """Which names may hold something other than a number, from their assignments in the line
    (and in the lines around it, for a nested ``bash -c``: ``inherited``)."""

    def __init__(self, root: Node, inherited: frozenset[str] = frozenset()) -> None:
        self.tainted: set[str] = set(_DATA_FED) | inherited
        self.assigned: set[str] = set()
        self.integer: set[str] = set()  # declared -i: every assignment to them is arithmetic
        for node in _walk(root):
            self._collect(node)

    def _taint(self, name: str) -> None:
        self.assigned.add(name)
        self.tainted.add(name)

    def _collect(self, node: Node) -> None:
        kind = node.type
        if kind == "variable_assignment":
            self._assignment(node)
        elif kind == "for_statement":
            var = node.child_by_field_name("variable")
            if var is not None:
                values = [c for c in node.named_children if c is not var and c.type != "do_group"]
                safe = bool(values) and all(self._int_words(v) for v in values)
                (self.assigned.add if safe else self._taint)(node_text(var))
        elif kind == "select_statement":
            var = node.child_by_field_name("variable")
            if var is not None:
                self._taint(node_text(var))
        elif kind in ("binary_expression", "postfix_expression", "unary_expression") and self._arith(node) \
                and _in_arithmetic(node):
            self._arith_assignment(node)
        elif kind == "expansion" and any(t in (":=", "=") for t in _tokens(node)):
            name = next((c for c in node.named_children if c.type == "variable_name"), None)
            if name is not None:
                self._taint(node_text(name))
        elif kind == "command":
            self._command(node)
        elif kind == "declaration_command":
            words = [node_text(c) for c in node.named_children if c.type == "word"]
            if any(w.startswith("-") and "i" in w for w in words):
                self.integer.update(node_text(c) for c in node.named_children if c.type == "variable_name")
                self.integer.update(node_text(c.child_by_field_name("name") or c)
                                    for c in node.named_children if c.type == "variable_assignment")

    @staticmethod
    def _arith(node: Node) -> bool:
        return any(t in ("=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "|=", "^=", "++", "--")
                   for t in _tokens(node))

    def _arith_assignment(self, node: Node) -> None:
        # What arithmetic stores is a number; evaluating the expression is checked where it is.
        target = node.named_children[0] if node.named_children else None
        if target is not None and target.type in ("variable_name", "word"):
            self.assigned.add(node_text(target))

    def _int_words(self, node: Node) -> bool:
        if _is_int_value(node):
            return True
        if node.type == "brace_expression":
            return all(c.type == "number" for c in node.named_children)
        if node.type == "command_substitution":  # $(seq 1 10) prints only numbers
            inner = node.named_children[0] if node.named_children else None
            return (inner is not None and inner.type == "command" and _command_name(inner) == "seq"
                    and all(c.type == "number" for c in _args(inner)))
        return False

    def _assignment(self, node: Node) -> None:
        name_node = node.child_by_field_name("name")
        if name_node is not None and name_node.type == "subscript":
            name_node = name_node.child_by_field_name("name")
        if name_node is None:
            return
        name = node_text(name_node)
        value = node.child_by_field_name("value")
        if value is not None and value.type == "array":
            safe = all(_is_int_value(c) for c in value.named_children)
        elif value is not None and value.type == "arithmetic_expansion":
            safe = "+=" not in _tokens(node)  # n=$((…)) stores a number (x+=$((…)) appends text)
        else:
            safe = _is_int_value(value) or (value is None and "+=" not in _tokens(node))
        (self.assigned.add if safe else self._taint)(name)

    def _command(self, node: Node) -> None:
        name = _command_name(node)
        args = [node_text(a) for a in _args(node)]
        if name in _READERS:
            operands = _operands(args, _READERS[name])
            targets = operands or (["REPLY"] if name == "read" else ["MAPFILE"])
            for target in targets:
                self._taint(target.split("[", 1)[0])
        elif name == "getopts" and len(args) >= 2:
            self._taint(args[1])
        elif name == "printf" and args and args[0].startswith("-v"):
            target = args[0][2:] or (args[1] if len(args) > 1 else "")
            self._taint(target.split("[", 1)[0])

    def unsafe(self, name: str) -> bool:
        return name in self.tainted


def _operands(args: list[str], with_value: str) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg.startswith("-") and len(arg) > 1:
            letter = arg[-1]
            skip = letter in with_value and len(arg) == 2
            continue
        out.append(arg)
    return out


def _names(node: Node) -> Iterator[tuple[str, Node]]:
    """The names an arithmetic expression reads: $v, ${v}, bare words, subscripted arrays."""
    for child in _walk(node):
        named = child.type == "word" and _NAME.match(node_text(child))
        if named or child.type in ("variable_name", "special_variable_name"):
            yield node_text(child), child


def _literal_text_hazard(node: Node) -> str | None:
    """A quoted string evaluated as arithmetic or as a name: code inside it runs."""
    for child in _walk(node):
        if child.type in ("raw_string", "string", "ansi_c_string") and _CODE_IN_TEXT.search(node_text(child)):
            return f"{node_text(child)} is evaluated, and an expansion inside it runs"
    return None


class _Hazards:
    def __init__(self, root: Node, inherited: frozenset[str]) -> None:
        self.taint = _Taint(root, inherited)
        self.found: list[str] = []
        for node in _walk(root):
            self._check(node)

    def _expression(self, node: Node, where: str) -> None:
        text_hazard = _literal_text_hazard(node)
        if text_hazard is not None:
            self.found.append(f"{where}: {text_hazard}")
            return
        for name, _ in _names(node):
            if self.taint.unsafe(name):
                self.found.append(f"{where} evaluates {name} as arithmetic, and {name} may hold an "
                                  "array subscript with a command in it (a[$(…)])")
                return
        for child in _walk(node):
            if child.type in ("command_substitution", "process_substitution") and child is not node:
                self.found.append(f"{where} evaluates the output of {node_text(child)} as arithmetic")
                return

    def _name_operand(self, node: Node, where: str) -> None:
        """A word used as a variable name: a subscript written in it is evaluated."""
        text = node_text(node).strip("'\"")
        computed = node.type == "string" and any(c.type != "string_content" for c in node.named_children)
        if computed or node.type not in ("word", "raw_string", "string", "variable_name"):
            self.found.append(f"{where} takes a variable name computed at run time; a subscript in "
                              "it would be evaluated")
            return
        if "[" in text:
            subscript = text[text.index("[") + 1:].rstrip("]")
            if _CODE_IN_TEXT.search(subscript) or any(self.taint.unsafe(n) for n in _NAMES_IN_TEXT.findall(subscript)):
                self.found.append(f"{where} evaluates the subscript of {text}")

    def _check(self, node: Node) -> None:
        kind = node.type
        if kind == "arithmetic_expansion" or (kind == "compound_statement" and "((" in _tokens(node)):
            self._expression(node, node_text(node))
        elif kind == "c_style_for_statement":
            for child in node.named_children:
                if child.type != "do_group":
                    self._expression(child, "for ((…))")
        elif kind == "binary_expression" and _in_double_brackets(node):
            if any(node_text(c) in _ARITH_TESTS for c in node.children if c.type == "test_operator"):
                self._expression(node, f"[[ {node_text(node)} ]]")
        elif kind == "unary_expression":
            op = next((node_text(c) for c in node.children if c.type == "test_operator"), "")
            operand = node.named_children[-1] if node.named_children else None
            if op == "-v" and operand is not None:
                self._name_operand(operand, "-v")
        elif kind == "subscript":
            index = node.child_by_field_name("index")
            if index is not None and node_text(index) not in ("@", "*"):
                self._expression(index, f"the subscript of {node_text(node)}")
        elif kind == "expansion":
            self._expansion(node)
        elif kind == "variable_assignment":
            name = node.child_by_field_name("name")
            value = node.child_by_field_name("value")
            if name is not None and node_text(name) in self.taint.integer and value is not None \
                    and not _is_int_value(value):
                self._expression(value, f"{node_text(name)} is an integer variable: {node_text(node)}")
        elif kind == "command":
            self._command(node)
        elif kind == "declaration_command":
            for arg in node.named_children:
                if arg.type in ("raw_string", "string", "concatenation", "simple_expansion", "expansion"):
                    self._name_operand(arg, node_text(node).split(" ", 1)[0])
        elif kind == "unset_command":
            for arg in node.named_children:
                if not node_text(arg).startswith("-"):
                    self._name_operand(arg, "unset")

    def _expansion(self, node: Node) -> None:
        tokens = _tokens(node)
        children = node.named_children
        if "!" in tokens and children and children[0].type == "variable_name":
            name = node_text(children[0])
            if self.taint.unsafe(name):
                self.found.append(f"${{!{name}}} reads the variable named by {name}'s value, and a "
                                  "subscript in that name is evaluated")
        if tokens.count(":") and len(children) > 1 and not any(t in tokens for t in (":-", ":=", ":+", ":?")):
            for offset in children[1:]:
                self._expression(offset, f"the offset in {node_text(node)}")

    def _command(self, node: Node) -> None:
        name = _command_name(node)
        args = _args(node)
        texts = [node_text(a) for a in args]
        if name == "let":
            for arg in args:
                self._expression(arg, f"let {node_text(arg)}")
        elif name in ("test", "[") and texts[:1] == ["-v"] and len(args) > 1:
            self._name_operand(args[1], "test -v")
        elif name == "printf" and texts and texts[0].startswith("-v"):
            target = args[0] if texts[0] != "-v" else (args[1] if len(args) > 1 else None)
            if target is not None:
                self._name_operand(target, "printf -v")
        elif name in _READERS:
            for arg in args:
                if not node_text(arg).startswith("-"):
                    self._name_operand(arg, name)
        elif name == "wait":
            # ``wait -p NAME`` (also ``-np NAME``, ``-pNAME``) assigns the job's id to NAME
            for index, text in enumerate(texts):
                if text.startswith("-") and "p" in text[1:]:
                    rest = text[text.index("p", 1) + 1:]
                    target = args[index] if rest else (args[index + 1] if index + 1 < len(args) else None)
                    if target is not None:
                        self._name_operand(target, "wait -p")


def hazards(root: Node, inherited: frozenset[str] = frozenset()) -> tuple[list[str], frozenset[str]]:
    """Why the command line may evaluate a value as code, one reason per place (empty: none),
    and the names that may hold non-numbers (for a ``bash -c`` nested in it)."""
    found = _Hazards(root, inherited)
    return found.found, frozenset(found.taint.tainted)
