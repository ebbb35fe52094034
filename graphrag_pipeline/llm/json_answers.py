"""Reading the JSON an LLM wrote, however slightly broken: strict first, then repaired with
``json_repair`` (trailing commas, single quotes, unquoted keys, truncation).

Every caller reads answers through `load_json`; where in the answer the JSON starts (after a code
fence, at each '{', the whole text) is the caller's choice.
"""

from __future__ import annotations

import json
import re
from typing import Any

# curly quotes where JSON has its own (after `{ [ , :` or before `: , } ]`): some models (and
# word processors) write a whole object that way; quotes inside the texts are left alone
_CURLY_OPEN = re.compile(r"([{\[,:]\s*)[\u201c\u201d]")
_CURLY_CLOSE = re.compile(r"[\u201c\u201d](\s*[:,}\]])")


def load_json(text: str) -> Any:
    """The JSON value in ``text`` (strict, else repaired), or None when nothing usable is found."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    if '"' not in text and ("\u201c" in text or "\u201d" in text):  # all its quotes curly, none straight
        straight = _CURLY_CLOSE.sub(r'"\1', _CURLY_OPEN.sub(r'\1"', text))
        try:
            return json.loads(straight)
        except ValueError:
            text = straight  # repaired below from the straightened text
    import json_repair

    try:
        value = json_repair.loads(text)
    except Exception:  # noqa: BLE001 - json_repair is lenient by design; any failure means "no JSON"
        return None
    return None if value == "" else value


def parse_json_reply(text: str) -> Any:
    """The JSON of a whole answer, a leading code fence dropped; None when nothing usable is found."""
    s = (text or "").strip()
    if s.startswith("```"):
        s = s.split("\n", 1)[1] if "\n" in s else ""
        if s.rstrip().endswith("```"):
            s = s.rstrip()[:-3]
        s = s.strip()
    return load_json(s)
