"""How the first admin signs in, framed so it stands out in a terminal or a container's log
(``manage.py bootstrap`` and ``manage.py ensure_local_admin``). Plain ASCII: a log viewer
or a terminal without UTF-8 shows it as drawn."""

from __future__ import annotations


def sign_in_box(*, url: str, username: str, password: str, note: str = "") -> str:
    """The sign-in URL, user and password in a box, with an optional last line."""
    lines = [f"Sign in at {url}", f"  user:     {username}", f"  password: {password}"]
    if note:
        lines.append(note)
    width = max(len(line) for line in lines)
    border = "+" + "-" * (width + 4) + "+"
    return "\n".join([border, *(f"|  {line.ljust(width)}  |" for line in lines), border])
