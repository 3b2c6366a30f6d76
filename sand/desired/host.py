"""This machine's timezone and locale: what a VM gets when the manifest names none.

A guest that runs on UTC and the C locale while its user lives in Berlin shows
every log and commit time an hour or two off, and an SSH session forwarding
``LANG=de_DE.UTF-8`` into a guest that never generated it warns on every
command. So the default is the host's own setting, read the way the C library
and the tz tools read it. A value found here that the rules refuse (a POSIX TZ
string, an unknown zone, LANG=C) is not an error: nothing in the manifest is
wrong, so the fixed fallback is used instead.

A fleet applied from several machines (or from CI) should name both in the
manifest's ``defaults``: otherwise each machine declares its own, and a guest
provisioned from one is reprovisioned by the next.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sand.manifest.locales import locale_problem, timezone_problem

FALLBACK_TIMEZONE = "Etc/UTC"
FALLBACK_LOCALE = "C.UTF-8"
# Plain C/POSIX is ASCII-only: agents and tools print UTF-8, so a host on C
# still gives its guests the UTF-8 flavour of it.
_ASCII_LOCALES = frozenset({"C", "POSIX"})


@dataclass(frozen=True)
class HostLocale:
    timezone: str
    locale: str

    @classmethod
    def detect(
        cls, environ: Mapping[str, str] | None = None, etc: Path = Path("/etc")
    ) -> HostLocale:
        env = os.environ if environ is None else environ
        return cls(host_timezone(env, etc), host_locale(env))


def host_timezone(environ: Mapping[str, str], etc: Path = Path("/etc")) -> str:
    """TZ, then /etc/timezone, then the zone /etc/localtime links to; else Etc/UTC."""
    candidates = [_zone_from_tz(environ.get("TZ", "")), _read(etc / "timezone")]
    try:
        target = os.readlink(etc / "localtime")
    except OSError:
        target = ""
    # /usr/share/zoneinfo/Europe/Berlin on Linux, /var/db/timezone/zoneinfo/... on macOS.
    if "zoneinfo/" in target:
        candidates.append(target.rsplit("zoneinfo/", 1)[1])
    return next((c for c in candidates if c and not timezone_problem(c)), FALLBACK_TIMEZONE)


def host_locale(environ: Mapping[str, str]) -> str:
    """LC_ALL, then LANG (what a login shell's programs would use); else C.UTF-8."""
    for name in ("LC_ALL", "LANG"):
        value = environ.get(name, "")
        if not value:
            continue
        if value in _ASCII_LOCALES or locale_problem(value):
            break  # set but unusable: the next variable is overridden by it anyway
        return value
    return FALLBACK_LOCALE


def _zone_from_tz(tz: str) -> str:
    # ':Europe/Berlin' and a path into a zoneinfo directory name a zone; any
    # other TZ value is a POSIX rule string, which no guest file can express.
    tz = tz.removeprefix(":")
    if "zoneinfo/" in tz:
        return tz.rsplit("zoneinfo/", 1)[1]
    return tz


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""
