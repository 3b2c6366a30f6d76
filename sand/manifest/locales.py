"""The rules for a guest's timezone and locale names.

Both names reach a guest script as plain argv-safe words, and both are checked
again there against what the guest itself has (its tz database, glibc's list
of supported locales); here they are checked as early as the manifest allows:
the shape of each, and for a timezone that this machine's tz database knows it
(when this machine has one: a host without tzdata can only check the shape).
"""

from __future__ import annotations

import re
import zoneinfo
from pathlib import Path

# Area/Location[/Sub], or a single name such as 'UTC' or 'EST5EDT'. No dots:
# no tz database name has one, so '..' can never reach the guest's path.
TIMEZONE = re.compile(r"^[A-Za-z][A-Za-z0-9_+-]{0,40}(/[A-Za-z0-9_+-]{1,40}){0,2}$")
# Names in the tz directory that are not zones of their own: 'localtime' is a
# link back to /etc/localtime on Debian, so setting it would make a loop.
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})
# language[_TERRITORY][.charset][@modifier], or C / POSIX with a charset.
LOCALE = re.compile(r"^(C|POSIX|[a-z]{2,3}(_[A-Z]{2})?)(\.[A-Za-z0-9-]{1,20})?(@[a-z0-9]{1,20})?$")


def timezone_problem(name: str) -> str | None:
    if not TIMEZONE.match(name) or name in _NOT_ZONES:
        return f"{name!r} is not a timezone name: write an IANA name such as 'Europe/Berlin'"
    roots = [Path(p) for p in zoneinfo.TZPATH if Path(p).is_dir()]
    if roots and not any(_is_zone_file(root / name) for root in roots):
        return (
            f"{name!r} is not in this machine's tz database ({roots[0]}); "
            "write an IANA name such as 'Europe/Berlin'"
        )
    return None


def locale_problem(name: str) -> str | None:
    if not LOCALE.match(name):
        return (
            f"{name!r} is not a locale name: write it like 'en_US.UTF-8' "
            "(language_TERRITORY.charset) or 'C.UTF-8'"
        )
    return None


def _is_zone_file(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(4) == b"TZif"
    except OSError:
        return False
