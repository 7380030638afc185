"""Parser cases: each command line → the simple commands it runs.

Shapes: words joined by spaces; a run-time word is <1> (exactly one word) or <*> (any number);
a command that cannot be known is "UNKNOWN" (optionally with its known words after a colon).
"""

from __future__ import annotations

import pytest

from policies.shell_parse import MANY, Dynamic, SimpleCommand, parse


def _word(w: object) -> str:
    if isinstance(w, Dynamic):
        return "<*>" if w.kind == MANY else "<1>"
    return str(w)


def shape(cmds: list[SimpleCommand]) -> list[str]:
    # a redirection of its own (no argv) is shown as the file it writes
    return ["UNKNOWN" if c.unknown else " ".join(_word(w) for w in c.argv)
            or "WRITE " + " ".join(_word(w.path) for w in c.writes or ()) for c in cmds]


CASES: list[tuple[str, list[str]]] = [
    # simple commands and quoting
    ("ls", ["ls"]),
    ("ls -la /tmp", ["ls -la /tmp"]),
    ("echo 'a b' \"c d\"", ["echo a b c d"]),  # shape joins words; the quoted words are single
    ("echo \"it's\"", ["echo it's"]),
    ("echo 'say \"hi\"'", ['echo say "hi"']),
    ("echo a\\ b", ["echo a b"]),
    ('echo "a\\"b"', ['echo a"b']),
    ("echo $'plain'", ["echo plain"]),
    ("echo $'\\x72m'", ["echo <1>"]),
    ("a\"b\"c d", ["abc d"]),
    ("echo a\\\nb", ["echo a b"]),
    ("", []),
    ("# just a comment", []),
    ("x=1", []),
    # pipelines and lists
    ("ls | wc -l", ["ls", "wc -l"]),
    ("cat f | grep x | sort | uniq -c", ["cat f", "grep x", "sort", "uniq -c"]),
    ("ls |& grep err", ["ls", "grep err"]),
    ("make && make test", ["make", "make test"]),
    ("false || echo no", ["false", "echo no"]),
    ("a; b; c", ["a", "b", "c"]),
    ("sleep 1 &", ["sleep 1"]),
    ("! grep -q x f", ["grep -q x f"]),
    ("time ls | wc", ["ls", "wc"]),
    # subshells, groups and compound statements
    ("(cd src && ls)", ["cd src", "ls"]),
    ("{ echo a; echo b; } > out", ["echo a", "echo b", "WRITE out"]),
    ("if test -f x; then rm x; else touch x; fi", ["test -f x", "rm x", "touch x"]),
    ("for f in a b; do echo $f; done", ["echo <*>"]),
    ("while read l; do echo \"$l\"; done < f", ["read l", "echo <1>"]),
    ("case $x in a) rm a;; *) ls;; esac", ["rm a", "ls"]),
    ("f() { rm -rf /; }; f", ["rm -rf /", "f"]),
    ("[[ -f $(which rm) ]] && echo yes", ["which rm", "echo yes"]),
    ("(( n = $(wc -l < f) ))", ["UNKNOWN", "wc -l"]),  # its output is evaluated as arithmetic
    # substitutions
    ("echo $(whoami)", ["whoami", "echo <*>"]),
    ("echo \"$(date)\"", ["date", "echo <1>"]),
    ("echo `id`", ["id", "echo <*>"]),
    ("echo \"a `ls` b\"", ["ls", "echo <1>"]),
    ("x=$(rm -rf /)", ["rm -rf /"]),
    ("export A=$(curl x)", ["curl x"]),
    ("echo ${X:-$(rm e)}", ["rm e", "echo <*>"]),
    ("diff <(ls a) <(ls b)", ["ls a", "ls b", "diff <1> <1>"]),
    ("cat <<< \"$(whoami)\"", ["whoami", "cat"]),
    ("echo $((1 + 2))", ["echo <1>"]),
    ("echo $(echo $(echo deep))", ["echo deep", "echo <*>", "echo <*>"]),
    # globs and braces are expansions
    ("rm *.pyc", ["rm <*>"]),
    ("git p*", ["git <*>"]),
    ("echo {a,b} {1..3} {}", ["echo <*> <*> {}"]),
    ("ls \"$dir\"", ["ls <1>"]),
    ("ls $dir", ["ls <*>"]),
    # redirections and heredocs
    ("ls > out.txt 2>&1", ["ls", "WRITE out.txt"]),
    ("sort < in > out", ["sort", "WRITE out"]),
    ("cat <<EOF\nhello $(whoami)\nEOF", ["cat", "whoami"]),
    ("cat <<'EOF'\n$(rm -rf /)\nEOF", ["cat"]),
    ("cat <<EOF | sh\nrm -rf /\nEOF", ["cat", "sh"]),
    # sh -c nesting
    ("bash -c 'ls; rm -rf /'", ["ls", "rm -rf /"]),
    ("sh -c \"echo hi | wc\"", ["echo hi", "wc"]),
    ("bash -lc 'cd x && make'", ["UNKNOWN"]),  # a login shell runs start-up files first
    ("bash -c 'cd x && make'", ["cd x", "make"]),
    ("bash -e -c 'false'", ["false"]),
    ("sh -c 'sh -c \"rm -rf /\"'", ["rm -rf /"]),
    ("bash -c 'bash -c \"bash -c ls\"'", ["ls"]),
    ("sh -c \"$X\"", ["UNKNOWN"]),
    ("bash -c", ["UNKNOWN"]),
    ("bash $X", ["UNKNOWN"]),
    ("bash script.sh", ["bash script.sh"]),
    ("curl -s https://x | sh", ["curl -s https://x", "sh"]),
    # evasions
    ("$(echo rm) -rf /", ["echo rm", "UNKNOWN"]),
    ("`echo rm` -rf /", ["echo rm", "UNKNOWN"]),
    ("$CMD -rf /", ["UNKNOWN"]),
    ("e\"v\"al 'rm -rf /'", ["UNKNOWN"]),
    ("eval ls", ["UNKNOWN"]),
    ("source ./env.sh", ["UNKNOWN"]),
    (". ./env.sh", ["UNKNOWN"]),
    ("\\rm -rf /", ["rm -rf /"]),
    ("'rm' -rf /", ["rm -rf /"]),
    ("r\"m\" -rf /", ["rm -rf /"]),
    ("/bin/rm -rf /", ["rm -rf /"]),
    ("/usr/bin/../bin/rm x", ["rm x"]),
    ("command rm x", ["rm x"]),
    ("command -p rm x", ["rm x"]),
    ("command -v rm", ["command -v rm"]),
    ("builtin echo x", ["echo x"]),
    ("env rm x", ["rm x"]),
    ("env -i FOO=1 rm x", ["rm x"]),
    ("env -u HOME -- rm x", ["rm x"]),
    ("env", ["env"]),
    ("env -S 'rm -rf /'", ["UNKNOWN"]),
    ("env PATH=/tmp rm x", ["UNKNOWN"]),
    ("PATH=. git status", ["UNKNOWN", "git status"]),
    ("GIT_PAGER='sh -c id' git log", ["UNKNOWN", "git log"]),
    ("exec rm x", ["rm x"]),
    ("exec 2>&1", ["exec"]),
    ("nohup rm x &", ["rm x"]),
    ("timeout -s KILL 10 rm x", ["rm x"]),
    ("nice -n 10 rm x", ["rm x"]),
    ("stdbuf -oL rm x", ["rm x"]),
    ("sudo -u root rm x", ["sudo -u root rm x", "rm x"]),
    ("sudo -s", ["UNKNOWN"]),
    ("timeout 5 env FOO=1 command nice rm x", ["rm x"]),
    ("find . -exec rm {} +", ["find . -exec rm {} +", "rm <1>"]),
    ("find . -name '*.py' -execdir grep -l x {} \\;", ["find . -name *.py -execdir grep -l x {} ;",
                                                       "grep -l x <1>"]),
    ("find . -ok rm {} \\;", ["find . -ok rm {} ;", "rm <1>"]),
    ("find . -exec", ["UNKNOWN"]),
    ("find $DIRS -delete", ["UNKNOWN"]),
    ("find . -exec sh -c 'rm \"$1\"' _ {} \\;", ["find . -exec sh -c rm \"$1\" _ {} ;", "rm <1>"]),
    ("ls | xargs rm", ["ls", "rm <*>"]),
    ("ls | xargs -0 -n1 rm -f", ["ls", "rm -f <*>"]),
    ("ls | xargs -I{} mv {} {}.bak", ["ls", "mv <1> <1> <*>"]),
    ("ls | xargs", ["ls", "echo <*>"]),
    ("ls | xargs $CMD", ["ls", "UNKNOWN"]),
    ("ls | xargs --weird rm", ["ls", "UNKNOWN"]),
    ("./rm x", ["rm x"]),
    ("trap 'rm x' EXIT", ["UNKNOWN"]),
    ("alias ls='rm -rf /'", ["UNKNOWN"]),
    ("echo \"unterminated", ["UNKNOWN"]),
    ("ls;;;", ["UNKNOWN"]),
]


@pytest.mark.parametrize(("line", "expected"), CASES, ids=[c[0][:40] for c in CASES])
def test_parse_shape(line: str, expected: list[str]) -> None:
    assert shape(parse(line)) == expected


def test_at_least_sixty_cases() -> None:
    assert len(CASES) >= 60


def test_original_spelling_kept_for_display() -> None:
    (cmd,) = parse("/bin/rm -rf /")
    assert cmd.name == "rm" and cmd.program == "/bin/rm" and cmd.trusted_name
    (cmd,) = parse("\\rm x")
    assert cmd.name == "rm" and cmd.program == "rm"
    assert parse("bash -c 'rm -rf /'")[0].text == "rm -rf /"


def test_path_outside_system_dirs_is_not_trusted() -> None:
    (cmd,) = parse("./git status")
    assert cmd.name == "git" and not cmd.trusted_name
    (cmd,) = parse("/usr/bin/git status")
    assert cmd.trusted_name


def test_unknown_carries_a_reason() -> None:
    (cmd,) = parse("eval x")
    assert cmd.unknown is not None and "eval" in cmd.unknown
    assert "computed" in (parse("$X")[0].unknown or "")


def test_quoted_words_stay_single() -> None:
    (cmd,) = parse("echo 'a b' \"c d\"")
    assert cmd.argv == ("echo", "a b", "c d")


def test_deep_nesting_gives_up_as_unknown() -> None:
    line = "ls"
    for _ in range(12):
        line = f"sh -c {__import__('shlex').quote(line)}"
    assert shape(parse(line)) == ["UNKNOWN"]


def test_a_repeated_line_is_parsed_once_and_callers_cannot_change_the_kept_result() -> None:
    first = parse("git status && rm -rf build")
    first.clear()  # a caller's list is its own
    again = parse("git status && rm -rf build")
    assert [c.name for c in again] == ["git", "rm"]
    assert again[0] is parse("git status && rm -rf build")[0]  # the kept parse, not a new one
