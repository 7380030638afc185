"""The key table: every form models send, one assertion each."""

from __future__ import annotations

import pytest

from sandbox.computer.keys import MODIFIERS, chord, normalize_key, split_chord
from sandloop.errors import UnknownKey

FORMS = {
    "Control": ["CTRL", "ctrl", "Ctrl", "Control", "CONTROL", "control_l", "Control_R", "CTL"],
    "Meta": ["CMD", "cmd", "COMMAND", "META", "Meta", "SUPER", "Super_L", "WIN", "Windows"],
    "Alt": ["ALT", "alt", "Alt_L", "OPTION", "Option", "OPT"],
    "Shift": ["SHIFT", "shift", "Shift_L", "Shift_R"],
    "Enter": ["ENTER", "enter", "RETURN", "Return", "KP_Enter"],
    "Escape": ["ESC", "esc", "ESCAPE", "Escape"],
    "Tab": ["TAB", "tab", "Tab"],
    "Space": ["SPACE", "space", "Spacebar", " "],
    "Backspace": ["BACKSPACE", "BackSpace", "backspace", "BKSP"],
    "Delete": ["DELETE", "Delete", "DEL", "del"],
    "Insert": ["INSERT", "Insert", "INS"],
    "Home": ["HOME", "Home"],
    "End": ["END", "End"],
    "PageUp": ["PAGEUP", "PageUp", "Page_Up", "PGUP", "Prior"],
    "PageDown": ["PAGEDOWN", "PageDown", "Page_Down", "PGDN", "page-down", "Next"],
    "ArrowLeft": ["ARROWLEFT", "ArrowLeft", "LEFT", "Left", "arrow_left"],
    "ArrowRight": ["ARROWRIGHT", "ArrowRight", "RIGHT", "Right"],
    "ArrowUp": ["ARROWUP", "ArrowUp", "UP", "Up"],
    "ArrowDown": ["ARROWDOWN", "ArrowDown", "DOWN", "Down"],
    "CapsLock": ["CAPSLOCK", "Caps_Lock"],
    "ContextMenu": ["MENU", "Menu"],
}


@pytest.mark.parametrize(("expected", "name"), [(e, n) for e, names in FORMS.items() for n in names])
def test_named_keys(expected: str, name: str) -> None:
    assert normalize_key(name) == expected


@pytest.mark.parametrize("n", range(1, 13))
def test_function_keys(n: int) -> None:
    assert normalize_key(f"F{n}") == normalize_key(f"f{n}") == f"F{n}"


@pytest.mark.parametrize("char", ["a", "A", "z", "0", "9", "/", "-", "+", ".", "'", "é"])
def test_single_characters_pass_through(char: str) -> None:
    assert normalize_key(char) == char


@pytest.mark.parametrize(("name", "char"), [("minus", "-"), ("PLUS", "+"), ("comma", ","),
                                           ("period", "."), ("slash", "/"), ("BackSlash", "\\")])
def test_punctuation_names(name: str, char: str) -> None:
    assert normalize_key(name) == char


@pytest.mark.parametrize("name", ["HYPERDRIVE", "CTRLALT", "F25", "", "  "])
def test_unknown_names_raise(name: str) -> None:
    with pytest.raises(UnknownKey):
        normalize_key(name)


def test_split_chord() -> None:
    assert split_chord("CTRL+A") == ["CTRL", "A"]
    assert split_chord("ctrl+shift+t") == ["ctrl", "shift", "t"]
    assert split_chord("CTRL++") == ["CTRL", "+"]
    assert split_chord("+") == ["+"]
    assert split_chord("ENTER") == ["ENTER"]


def test_chords() -> None:
    assert chord(["CTRL", "A"]) == ["Control", "a"]  # select all, not Control+Shift+A
    assert chord("CTRL+A") == ["Control", "a"]
    assert chord(["CMD+SHIFT", "T"]) == ["Meta", "Shift", "T"]
    assert chord(["ALT", "F4"]) == ["Alt", "F4"]
    assert chord(["SHIFT", "a"]) == ["Shift", "a"]
    assert chord(["A"]) == ["A"]
    assert chord(["ENTER"]) == ["Enter"]
    assert chord("ctrl++") == ["Control", "+"]
    with pytest.raises(UnknownKey):
        chord([])


def test_modifiers_are_table_values() -> None:
    assert {normalize_key(n) for n in ("CTRL", "CMD", "ALT", "SHIFT", "ALTGR")} == MODIFIERS
