"""The one table that turns the key names models send into canonical key names.

The canonical names are the UI Events ``KeyboardEvent.key`` values (``Control``, ``Enter``,
``ArrowLeft``, ``a``): what Playwright's keyboard takes as they are, and what any other
placement translates once (an X server's keysyms, say) instead of reading the models' dialects.

Models write keys in many dialects: xdotool (``Return``, ``Page_Down``, ``Control_L``), DOM
(``ArrowLeft``, ``PageDown``), shouty shorthand (``CTRL``, ``ESC``, ``PGDN``) and platform words
(``CMD``, ``OPTION``, ``WIN``). Every multi-character name is reduced to a canonical spelling
(upper case, no ``_``/``-``/space, no left/right suffix) and looked up here; single characters
pass through unchanged, so ``"a"``, ``"A"``, ``"/"`` and ``"+"`` are typed as themselves.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from sandloop.errors import UnknownKey

__all__ = ["MODIFIERS", "chord", "normalize_key", "split_chord"]

# canonical spelling -> UI Events key value (the names Playwright's keyboard takes)
_TABLE: dict[str, str] = {
    # modifiers
    "CTRL": "Control", "CONTROL": "Control", "CTL": "Control",
    "CMD": "Meta", "COMMAND": "Meta", "META": "Meta", "SUPER": "Meta", "WIN": "Meta",
    "WINDOWS": "Meta", "OS": "Meta",
    "ALT": "Alt", "OPTION": "Alt", "OPT": "Alt",
    "ALTGR": "AltGraph", "ALTGRAPH": "AltGraph",
    "SHIFT": "Shift",
    # editing and whitespace
    "ENTER": "Enter", "RETURN": "Enter", "KPENTER": "Enter",
    "ESC": "Escape", "ESCAPE": "Escape",
    "TAB": "Tab",
    "SPACE": "Space", "SPACEBAR": "Space",
    "BACKSPACE": "Backspace", "BKSP": "Backspace",
    "DELETE": "Delete", "DEL": "Delete",
    "INSERT": "Insert", "INS": "Insert",
    # navigation
    "HOME": "Home", "END": "End",
    "PAGEUP": "PageUp", "PGUP": "PageUp", "PRIOR": "PageUp",
    "PAGEDOWN": "PageDown", "PGDN": "PageDown", "PGDOWN": "PageDown", "NEXT": "PageDown",
    "ARROWLEFT": "ArrowLeft", "LEFT": "ArrowLeft",
    "ARROWRIGHT": "ArrowRight", "RIGHT": "ArrowRight",
    "ARROWUP": "ArrowUp", "UP": "ArrowUp",
    "ARROWDOWN": "ArrowDown", "DOWN": "ArrowDown",
    # locks and system keys
    "CAPSLOCK": "CapsLock", "CAPS": "CapsLock",
    "NUMLOCK": "NumLock", "SCROLLLOCK": "ScrollLock",
    "PRINTSCREEN": "PrintScreen", "PRINT": "PrintScreen", "PRTSC": "PrintScreen",
    "PAUSE": "Pause", "MENU": "ContextMenu", "CONTEXTMENU": "ContextMenu", "APPS": "ContextMenu",
    # punctuation by name (xdotool keysyms)
    "MINUS": "-", "PLUS": "+", "EQUAL": "=", "EQUALS": "=", "COMMA": ",", "PERIOD": ".",
    "DOT": ".", "SLASH": "/", "BACKSLASH": "\\", "SEMICOLON": ";", "COLON": ":",
    "APOSTROPHE": "'", "QUOTE": "'", "QUOTEDBL": '"', "GRAVE": "`", "BACKQUOTE": "`",
    "BRACKETLEFT": "[", "BRACKETRIGHT": "]", "BRACELEFT": "{", "BRACERIGHT": "}",
    "ASTERISK": "*", "AMPERSAND": "&", "AT": "@", "NUMBERSIGN": "#", "DOLLAR": "$",
    "PERCENT": "%", "EXCLAM": "!", "QUESTION": "?", "UNDERSCORE": "_", "BAR": "|",
    "LESS": "<", "GREATER": ">", "PARENLEFT": "(", "PARENRIGHT": ")", "TILDE": "~",
}
_TABLE.update({f"F{n}": f"F{n}" for n in range(1, 25)})

#: The keys that modify others (held, not typed).
MODIFIERS = frozenset({"Control", "Meta", "Alt", "AltGraph", "Shift"})

# xdotool's left/right variants (Control_L, Shift_R, Super_L) mean the same key for a page.
_SIDE_SUFFIX = re.compile(r"[LR]$")
_SEPARATORS = re.compile(r"[_\- ]")


def normalize_key(name: str) -> str:
    """One key name as a model wrote it -> its canonical name. Raises UnknownKey."""
    if len(name) == 1:  # a single character is the key that types it (" " is Space)
        return "Space" if name == " " else name
    upper = name.strip().upper()
    for candidate in (upper, _SEPARATORS.sub("", upper)):
        if candidate in _TABLE:
            return _TABLE[candidate]
        sideless = _SIDE_SUFFIX.sub("", candidate)
        if sideless != candidate and _TABLE.get(sideless) in MODIFIERS:
            return _TABLE[sideless]
    raise UnknownKey(f"unknown key name {name!r}")


def split_chord(text: str) -> list[str]:
    """``"CTRL+A"`` -> ``["CTRL", "A"]``; a ``+`` that is itself a key survives (``"CTRL++"``)."""
    if len(text) <= 1:
        return [text]
    parts: list[str] = []
    for piece in text.split("+"):
        if piece:
            parts.append(piece)
        elif not parts or parts[-1] != "+":
            parts.append("+")  # an empty piece is where a literal "+" was
    # "CTRL++" splits into ["CTRL", "", ""]: exactly one "+" key, added once above.
    return parts


def chord(keys: Sequence[str] | str) -> list[str]:
    """The canonical key names of a chord, in press order (release is the reverse).

    Accepts a list (``["CTRL", "A"]``), a ``+``-joined string (``"CTRL+A"``) or a list mixing
    both. With a non-Shift modifier held, letters are sent lower case so ``CTRL+A`` is
    Control+a (select all), not Control+Shift+a.
    """
    items: Iterable[str] = [keys] if isinstance(keys, str) else keys
    names = [normalize_key(part) for item in items for part in split_chord(item)]
    if not names:
        raise UnknownKey("empty key chord")
    if any(n in MODIFIERS and n != "Shift" for n in names) and "Shift" not in names:
        names = [n.lower() if len(n) == 1 and n.isalpha() else n for n in names]
    return names
