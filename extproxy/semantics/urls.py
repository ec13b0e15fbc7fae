"""A URL as it may be shown: the password of its userinfo replaced.

The Error the combined form answers names a failed call's URL as Go's client prints it
(password "***", see ``errors``): Go hides the password only. The records, pages and copied-out
commands hide more (a web URL's lone user name is a token: ``extproxy.redaction``'s
``url_without_password``, which also notes what it removed for the call's echoes), so the two
share this reading of where the userinfo ends, not one function.

May import: the standard library. No Django, no I/O.
"""

from __future__ import annotations


def url_password_replaced(url: str, replacement: str) -> str:
    """``url`` with the password of its userinfo replaced by ``replacement``.

    Read as Go's url.Parse and Python's urlsplit read it: the authority follows "://" (or a
    leading "//") and ends at the first "/", "?" or "#"; the userinfo ends at the authority's
    LAST "@" (a password may hold one); a userinfo without ":" has no password, and an empty
    user is still a user (``http://:token@host/``). Everything else is left as written.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        if not url.startswith("//"):
            return url
        scheme, sep, rest = "", "//", url[2:]
    ends = [i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0]
    authority, tail = rest[: min(ends, default=len(rest))], rest[min(ends, default=len(rest)):]
    userinfo, at, host = authority.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:{replacement}@{host}{tail}"
