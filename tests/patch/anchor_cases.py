"""Generated V4A edits of Python-like files whose hunks are anchored the way models write them:
bare, on the enclosing ``def`` (repeated for each hunk in it), on ``class`` + ``def`` stacks, or
on the enclosing class. Shared by the anchor property tests; the intended result is known.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

STATEMENTS = ["x = 1", "y = 2", "return x", "pass", "x += 1", ""]
NAMES = ["f", "g", "run"]


@dataclass(frozen=True)
class Func:
    class_line: int | None  # the index of its class line, for methods
    def_line: int
    body: tuple[int, ...]  # indices of its body lines


@dataclass
class Case:
    lines: list[str]
    funcs: list[Func]
    diff: str
    expected: list[str]
    anchors: list[str]  # each hunk's anchor style ("def again": same function), for statistics

    @property
    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)

    @property
    def expected_text(self) -> str:
        return "".join(line + "\n" for line in self.expected)


@st.composite
def programs(draw: st.DrawFn, unique: bool) -> tuple[list[str], list[Func]]:
    """Classes with methods and top-level functions. ``unique``: no line occurs twice."""
    lines: list[str] = []
    funcs: list[Func] = []
    for block in range(draw(st.integers(1, 3))):
        is_class = draw(st.booleans())
        class_line: int | None = None
        indent = ""
        if is_class:
            class_line = len(lines)
            lines.append(f"class C{block}:" if unique else f"class {draw(st.sampled_from('AB'))}:")
            indent = "    "
        for k in range(draw(st.integers(1, 3)) if is_class else 1):
            name = f"f{block}_{k}" if unique else draw(st.sampled_from(NAMES))
            def_line = len(lines)
            lines.append(f"{indent}def {name}(self):" if is_class else f"{indent}def {name}():")
            body = []
            for j in range(draw(st.integers(1, 5))):
                stmt = f"v{block}_{k}_{j} = {j}" if unique else draw(st.sampled_from(STATEMENTS))
                body.append(len(lines))
                lines.append(f"{indent}    {stmt}" if stmt else "")
            funcs.append(Func(class_line, def_line, tuple(body)))
    return lines, funcs


@st.composite
def cases(draw: st.DrawFn, unique: bool) -> Case:
    lines, funcs = draw(programs(unique))
    owner = {i: f for f in funcs for i in f.body}
    targets = sorted(draw(st.sets(st.sampled_from(sorted(owner)), min_size=1, max_size=5)))
    expected = list(lines)
    replaced: dict[int, list[str]] = {}
    diff: list[str] = []
    consumed = 0  # lines before this index belong to earlier hunks
    scope = 0  # where the last anchored hunk's first anchor was (sandloop's rule)
    styles: list[str] = []
    previous: Func | None = None  # the function of the previous anchored hunk
    for n, target in enumerate(targets):
        func = owner[target]
        nxt = targets[n + 1] if n + 1 < len(targets) else len(lines)
        style = draw(st.sampled_from(["bare", "def", "def", "stack", "class"]))
        if style in ("stack", "class") and func.class_line is None:
            style = "def"
        if style == "class" and func.class_line is not None and func.class_line < scope:
            style = "def"  # going back above an earlier hunk's anchor is refused by design
        first_body = func.body[0]
        before = draw(st.integers(0, 2))
        top = max(target - before, consumed, first_body if style != "bare" else 0)
        after = draw(st.integers(0, 2))
        bottom = min(target + 1 + after, nxt, func.body[-1] + 1)
        new = [f"{lines[target]}  # edited {n}"] if draw(st.booleans()) else []
        if style == "def":
            diff.append(f"@@ {lines[func.def_line]}")
        elif style == "stack":
            diff += [f"@@ {lines[func.class_line or 0]}", f"@@ {lines[func.def_line]}"]
        elif style == "class":
            diff.append(f"@@ {lines[func.class_line or 0]}")
        else:
            diff.append("@@")
        if style in ("stack", "class") and func.class_line is not None:
            scope = func.class_line
        elif style == "def":
            scope = func.def_line
        diff += [f" {line}" for line in lines[top:target]]
        diff.append(f"-{lines[target]}")
        diff += [f"+{line}" for line in new]
        diff += [f" {line}" for line in lines[target + 1 : bottom]]
        replaced[target] = new
        consumed = bottom
        styles.append(f"{style} again" if style != "bare" and previous == func else style)
        previous = func if style != "bare" else previous
    for target in reversed(targets):
        expected[target : target + 1] = replaced[target]
    return Case(lines, funcs, "\n".join(diff) + "\n", expected, styles)
