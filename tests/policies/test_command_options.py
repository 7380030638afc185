"""Allowed programs that run commands through their arguments, and the hardened URL rules."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from policies.engine import PolicyEngine, load_policy
from policies.lint import lint
from policies.shell_parse import parse
from sandloop.matching import ip_literal
from sandloop.verdict import Decision

PRESETS = {name: load_policy(name) for name in ("default", "strict", "ci")}

# Each of these ran a command (or wrote a file) under an allow rule before.
RUNS_COMMANDS = [
    "sort --compress-program=sh x",
    "sort --compress-prog=sh x",
    "sort -S 1M --compress-program sh x",
    "git grep -O'cmd' x",
    "git grep -O x",
    "git grep --open-files-in-pager=cmd x",
    "tar -cf /dev/null x --checkpoint=1 --checkpoint-action=exec=sh",
    "tar --to-command=sh -xf a.tar",
    "tar --to-com=sh -xf a.tar",
    "tar -I sh -xf a.tar",
    "tar -xIsh -f a.tar",
    "tar --use-compress-program=sh -xf a.tar",
    "tar xIf sh a.tar",
    "tar -F sh -cf a.tar x",
    "git rebase --exec cmd main",
    "git rebase -x cmd main",
    "git rebase -xcmd main",
    "git fetch --upload-pack=cmd origin",
    "git pull --upload-pack=cmd origin",
    "git clone --upload-pack=cmd a b",
    "git clone -u cmd a b",
    "git ls-remote --upload-pack=cmd origin",
    "git ls-remote -u cmd origin",
    "git clone --template=./t a b",
    "git -c core.pager=cmd log",
    "git -c core.sshCommand=cmd fetch origin",
    "git -c alias.x=!cmd x",
    "git -C . rebase --exec sh main",
    "git bisect run cmd",
    "git bisect run ./test.sh",
    "git submodule foreach cmd",
    "git difftool -x cmd",
    "zip -TT cmd -T a.zip x",
    "zip --unzip-command=cmd -T a.zip x",
    "rsync -e cmd a b:c",
    "rsync --rsh=cmd a b:c",
    "LESSOPEN='|sh %s' less f",
    "env LESSOPEN='|sh %s' less f",
    "less '+!id' f",
    "find . -fprint /x",
    "find . -fprintf /x %p",
    "sed 'e id'",
    "sed -n 'w /x' f",
    "sed 's/a/id/e' f",
    "sed 's/a/b/w /x' f",
    "sed -e p -e 'e id' f",
    "sed --expression='w /x' f",
    "sed -f script.sed f",
    "awk 'BEGIN{system(\"id\")}'",
    "awk '{print | \"sh\"}' f",
    "vim -c '!cmd'",
    "vi -c '!cmd' f",
    "man -P cmd ls",
    "man --pager=cmd ls",
    "env -S 'sh -c id'",
    "xargs sh",
    "nice sort --compress-program=sh x",
    "nice -n 5 tar --to-command=sh -xf a",
    "timeout 5 git rebase --exec sh main",
    "stdbuf -o0 sort --compress-program=sh x",
    "find . -exec tar -I sh -xf {} \\;",
    "ls | xargs sort --compress-program=sh",
    # found while there
    "rg --pre sh x",
    "rg --hostname-bin=sh x",
    "ag --pager sh x",
    "fd . -x rm",
    "fd -e py --exec-batch sh",
    "PATH[0]=/tmp/x ls",
    "read PATH <<< /tmp/x",
    "printf -v PATH /tmp/x",
    "declare -n r=PATH; r=/tmp/x",
    "sort --compress-program=\"$X\" x",
]


@pytest.mark.parametrize("preset", ["default", "strict", "ci"])
@pytest.mark.parametrize("line", RUNS_COMMANDS)
def test_command_running_options_are_never_allowed(preset: str, line: str) -> None:
    verdict = PRESETS[preset].shell(line)
    assert verdict.decision is not Decision.ALLOW, (line, verdict)
    if preset != "default":
        assert verdict.decision is Decision.DENY


# The same programs without those options are still allowed (default), read-only ones (strict).
STILL_ALLOWED = [
    ("sort -u -o out.txt x", "default"),
    ("sort -k2 x", "strict"),
    ("git grep -n TODO", "strict"),
    ("tar -czf a.tgz src", "default"),
    ("tar tzf a.tgz", "default"),
    ("tar -cf a.tar --checkpoint=100 --checkpoint-action=dot src", "default"),
    ("git rebase -i main", "default"),
    ("git fetch origin", "default"),
    ("git fetch -u origin", "default"),
    ("git bisect start", "default"),
    ("zip -r a.zip src", "default"),
    ("sed -i 's/foo/bar/g' src/a.py", "default"),
    ("sed -n '1,5p;$p' f", "default"),
    ("sed -n '/x/w /dev/stdout' f", "default"),
    ("sed -e ':a' -e 'N;$!ba' -e 's/\\n/ /g' f", "default"),
    ("sed '/x/{s/a/b/g;p}' f", "default"),
    ("sed '/x/a\\\nwrite this' f", "default"),
    ("sed --sandbox 'e id' f", "default"),
    ("rg -n TODO src", "strict"),
    ("rg --pre-glob '*.gz' x", "strict"),
    ("fd -e py -x wc -l", "default"),
    ("read -r line", "default"),
    ("printf '%s\\n' \"$x\"", "strict"),
    ("nice -n 5 sort x", "strict"),
]


@pytest.mark.parametrize(("line", "preset"), STILL_ALLOWED)
def test_ordinary_uses_stay_allowed(line: str, preset: str) -> None:
    assert PRESETS[preset].shell(line).decision is Decision.ALLOW, PRESETS[preset].shell(line)


@pytest.mark.parametrize(
    ("line", "inner"),
    [
        ("sort --compress-program=gzip x", [["gzip"]]),
        ("git rebase --exec 'make test' main", [["make", "test"]]),
        ("tar --checkpoint-action=exec='echo hi' -cf a x", [["echo", "hi"]]),
        ("git bisect run make -j2 test", [["make", "-j2", "test"]]),
        ("git submodule foreach 'git clean -fdx'", [["git", "clean", "-fdx"]]),
        ("zip -TT 'unzip -t' -T a.zip x", [["unzip", "-t"]]),
        ("rsync -avze ssh a b:c", [["ssh"]]),
        ("man -P cat ls", [["cat"]]),
        ("tar xIf zstd a.tar", [["zstd"]]),
    ],
)
def test_the_command_an_option_runs_is_parsed(line: str, inner: list[list[str]]) -> None:
    cmds = parse(line)
    assert all(c.unknown is None for c in cmds)
    assert [list(c.argv) for c in cmds[1:]] == inner


def test_an_option_computed_at_run_time_is_unknown() -> None:
    for line in ('sort "$opt" x', "git rebase --exec \"$X\"", 'tar -xf a --to-command="$c"',
                 "sed \"s/$a/b/\" f"):
        assert any(c.unknown for c in parse(line)), line


def test_allowed_inner_command_follows_its_own_rule() -> None:
    # strict allows `sort` and `cat`, but not a compress program that is not listed
    strict = PRESETS["strict"]
    assert strict.shell("sort --compress-program=cat x").rule_id == "option-runs-command"
    default = PRESETS["default"]
    assert default.shell("git rebase --exec 'make test' main").rule_id == "git-option-runs-command"


# --- word globs in patterns ------------------------------------------------------------------


RULE = '[[shell.rules]]\nid = "{id}"\npattern = {pattern}\ndecision = "{decision}"\njustification = "j"\n'


def test_word_globs(write_policy: Callable[..., Path]) -> None:
    engine = load_policy(write_policy(
        'version = 1\n[shell]\ndefault = "deny"\n'
        + RULE.format(id="co", pattern='["sort", "**", ["--compress-program=*", "-x"]]',
                      decision="prompt")
        + RULE.format(id="py", pattern='["python3.*"]', decision="prompt")
        + RULE.format(id="star", pattern='["echo", "[*]"]', decision="prompt")
        + RULE.format(id="sort", pattern='["sort"]', decision="allow")
        + RULE.format(id="echo", pattern='["echo"]', decision="allow")))
    first = engine.explain_shell("sort --compress-program=gzip x")[0][1]  # then gzip: denied
    assert first.rule_id == "co"
    assert engine.shell("sort -x f").rule_id == "co"
    assert engine.shell("sort --compress-programme f").rule_id == "sort"
    assert engine.shell("python3.12 x.py").rule_id == "py"
    assert engine.shell("python3 x.py").rule_id == "shell.default"
    assert engine.shell("echo '*'").rule_id == "star"
    assert engine.shell("echo a").rule_id == "echo"
    # a run-time word may be the option: decided as strictly as if it were
    assert engine.explain_shell('sort "$o" f')[0][1].rule_id == "co"


def test_glob_examples_are_checked(write_policy: Callable[..., Path]) -> None:
    from policies.model import PolicyLoadError

    rule = RULE.format(id="co", pattern='["sort", "**", "--compress-program=*"]', decision="deny")
    with pytest.raises(PolicyLoadError, match="does not match"):
        load_policy(write_policy('version = 1\n' + rule + 'match = ["sort --compress x"]\n'))


# --- the lint ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "probe"),
    [('["git"]', "git -c"), ('["find"]', "-fprint"), ('[["ls", "vim"]]', None)],
)
def test_lint_flags_allow_without_command_option_rules(
        write_policy: Callable[..., Path], pattern: str, probe: str | None) -> None:
    text = "version = 1\n" + RULE.format(id="r", pattern=pattern, decision="allow")
    findings = lint(load_policy(write_policy(text)))
    codes = {f.code for f in findings if f.rule_id == "r"}
    if probe is None:
        assert "escapable-allow" in codes  # vim runs programs through its own commands
    else:
        assert "command-option-allow" in codes
        assert any(probe in f.message for f in findings if f.code == "command-option-allow")


def test_lint_accepts_allow_after_covering_rules(write_policy: Callable[..., Path]) -> None:
    text = ("version = 1\n"
            + RULE.format(id="git-opts", pattern='["git", ["-c", "-C", "--exec-path=*"]]',
                          decision="prompt")
            + RULE.format(id="find-w", pattern='["find", "**", ["-fprint*", "-fls", "-delete"]]',
                          decision="prompt")
            + RULE.format(id="git", pattern='["git"]', decision="allow")
            + RULE.format(id="find", pattern='["find"]', decision="allow")
            + RULE.format(id="tools", pattern='[["sort", "tar", "sed", "zip", "rg", "man"]]',
                          decision="allow"))
    assert [f for f in lint(load_policy(write_policy(text)))
            if f.code == "command-option-allow"] == []


def test_lint_flags_an_allowing_default(write_policy: Callable[..., Path]) -> None:
    findings = lint(load_policy(write_policy('version = 1\n[shell]\ndefault = "allow"\n')))
    assert any(f.code == "command-option-allow" and f.rule_id == "shell.default" for f in findings)


# --- URLs: IP literals and loopback names --------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "address"),
    [("127.0.0.1", "127.0.0.1"), ("0x7f000001", "127.0.0.1"), ("2130706433", "127.0.0.1"),
     ("0177.0.0.1", "127.0.0.1"), ("127.1", "127.0.0.1"), ("0x7f.0.0.1", "127.0.0.1"),
     ("0", "0.0.0.0"), ("[::ffff:169.254.169.254]", "169.254.169.254"),
     ("::ffff:a9fe:a9fe", "169.254.169.254"), ("[0:0::1]", "::1"), ("example.com", None),
     ("1e3", None), ("cafe.dead", None)],
)
def test_ip_literal_normalises_every_form(host: str, address: str | None) -> None:
    assert ip_literal(host) == address


@pytest.mark.parametrize("host", ["09.1.1.1", "256.1.1.1", "1.2.3.4.5", "a.0x1", "1.256.1"])
def test_hosts_ending_in_a_number_must_be_addresses(host: str) -> None:
    from sandloop.errors import NotAnAddress

    with pytest.raises(NotAnAddress):
        ip_literal(host)


IP_URLS = [
    "http://127.0.0.1:2375/containers/json",
    "http://[::ffff:169.254.169.254]/latest/meta-data/",
    "http://100.100.100.200/latest/meta-data/",
    "http://0x7f000001/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://127.1/",
    "http://[::1]:8080/",
    "http://[::ffff:7f00:1]/",
    "http://%31%32%37.0.0.1/",
    "http://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11/",
    "http://127\u30020\u30020\u30021/",
    "http://localhost:8000/",
    "http://app.localhost/",
    "http://09.1.1.1/",
    "http://[fe80::1%25eth0]/",
]


@pytest.mark.parametrize("url", IP_URLS)
def test_ip_literals_are_not_allowed_by_wildcards(url: str, write_policy: Callable[..., Path]
                                                  ) -> None:
    assert PRESETS["default"].url(url).decision is Decision.DENY  # allow_domains = ["*"]
    engine = load_policy(write_policy(
        'version = 1\n[browser]\nallow_domains = ["*", "*.localhost", "*.1"]\ndefault = "allow"\n'))
    assert engine.url(url).decision is Decision.DENY


def test_listed_addresses_are_allowed_exactly(write_policy: Callable[..., Path]) -> None:
    engine = load_policy(write_policy(
        'version = 1\n[browser]\nallow_domains = ["0x7f000001", "[::1]", "localhost", "*"]\n'))
    assert engine.policy.browser.allow_domains[:2] == ["127.0.0.1", "::1"]
    for url in ("http://127.0.0.1:9/", "http://2130706433/", "http://[::ffff:127.0.0.1]/",
                "http://[::1]/", "http://localhost/", "https://example.com/"):
        assert engine.url(url).decision is Decision.ALLOW, url
    for url in ("http://127.0.0.2/", "http://a.localhost/", "http://[::2]/"):
        assert engine.url(url).decision is Decision.DENY, url


def test_blocked_addresses_are_blocked_in_every_form() -> None:
    default: PolicyEngine = PRESETS["default"]
    for url in ("http://169.254.169.254/", "http://0xa9fea9fe/", "http://[::ffff:a9fe:a9fe]/",
                "http://2852039166/"):
        assert default.url(url).rule_id == "browser.block_domains", url


def test_bad_address_in_a_domain_list_fails_to_load(write_policy: Callable[..., Path]) -> None:
    from policies.model import PolicyLoadError

    with pytest.raises(PolicyLoadError, match="not a valid IP address"):
        load_policy(write_policy('version = 1\n[browser]\nallow_domains = ["1.2.3.456"]\n'))
