"""A VM's timezone and locale: the manifest's, else this machine's, else a fixed fallback.

The host side is read from a real environment mapping and a real /etc-like
directory (files and symlinks in tmp_path), the way the C library reads them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sand.desired.host import HostLocale, host_locale, host_timezone
from sand.desired.spec import build_desired
from sand.manifest import parse_manifest

MANIFEST = """\
apiVersion: sand/v1
project: demo
backends:
  laptop: {type: lima}
defaults:
  image: debian-12
DEFAULTS
vms:
  - name: own
    timezone: Asia/Tokyo
    locale: ja_JP.UTF-8
    docker: true
  - name: plain
"""
BERLIN = HostLocale(timezone="Europe/Berlin", locale="de_DE.UTF-8")


def _etc(tmp_path: Path, timezone: str | None = None, localtime: str | None = None) -> Path:
    etc = tmp_path / "etc"
    etc.mkdir(parents=True)
    if timezone is not None:
        (etc / "timezone").write_text(timezone)
    if localtime is not None:
        (etc / "localtime").symlink_to(localtime)
    return etc


@pytest.mark.parametrize(
    ("tz", "expected"),
    [
        ("Europe/Berlin", "Europe/Berlin"),
        (":America/New_York", "America/New_York"),
        ("/usr/share/zoneinfo/Asia/Kolkata", "Asia/Kolkata"),
        ("America/Argentina/Buenos_Aires", "America/Argentina/Buenos_Aires"),
    ],
)
def test_tz_names_the_zone_first(tmp_path, tz, expected):
    etc = _etc(tmp_path, timezone="Australia/Perth\n")
    assert host_timezone({"TZ": tz}, etc) == expected


def test_a_posix_rule_or_unknown_tz_gives_way_to_etc_timezone(tmp_path):
    etc = _etc(tmp_path, timezone="Australia/Perth\n")
    assert host_timezone({"TZ": "CET-1CEST,M3.5.0,M10.5.0/3"}, etc) == "Australia/Perth"
    assert host_timezone({"TZ": "Mars/Olympus"}, etc) == "Australia/Perth"


@pytest.mark.parametrize(
    "target",
    ["/usr/share/zoneinfo/Europe/Paris", "../usr/share/zoneinfo/Europe/Paris",
     "/var/db/timezone/zoneinfo/Europe/Paris"],
)  # fmt: skip
def test_without_tz_or_etc_timezone_the_localtime_link_names_the_zone(tmp_path, target):
    etc = _etc(tmp_path, localtime=target)
    assert host_timezone({}, etc) == "Europe/Paris"


def test_unusable_host_settings_fall_back_to_utc(tmp_path):
    etc = _etc(tmp_path, timezone="../../etc/shadow\n", localtime="/nowhere/at/all")
    assert host_timezone({"TZ": "localtime"}, etc) == "Etc/UTC"
    assert host_timezone({}, _etc(tmp_path / "empty")) == "Etc/UTC"


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"LC_ALL": "de_DE.UTF-8", "LANG": "en_GB.UTF-8"}, "de_DE.UTF-8"),
        ({"LC_ALL": "", "LANG": "en_GB.UTF-8"}, "en_GB.UTF-8"),
        ({"LANG": "sr_RS.UTF-8@latin"}, "sr_RS.UTF-8@latin"),
        ({"LANG": "C.UTF-8"}, "C.UTF-8"),
        ({"LANG": "C"}, "C.UTF-8"),  # ASCII-only: its UTF-8 flavour
        ({"LANG": "POSIX"}, "C.UTF-8"),
        ({"LC_ALL": "not a locale", "LANG": "en_GB.UTF-8"}, "C.UTF-8"),  # LC_ALL wins, unusable
        ({}, "C.UTF-8"),
    ],
)
def test_locale_is_lc_all_then_lang_else_c_utf8(environ, expected):
    assert host_locale(environ) == expected


def _vms(defaults: str, host: HostLocale = BERLIN):
    text = MANIFEST.replace("DEFAULTS", defaults)
    return {vm.name: vm for vm in build_desired(parse_manifest(text), host=host).vms}


def test_the_manifest_wins_over_the_host_and_a_vm_over_its_defaults():
    vms = _vms("  timezone: America/Chicago\n  locale: en_US.UTF-8\n")
    assert (vms["own"].timezone, vms["own"].locale, vms["own"].docker) == (
        "Asia/Tokyo", "ja_JP.UTF-8", True,
    )  # fmt: skip
    assert (vms["plain"].timezone, vms["plain"].locale, vms["plain"].docker) == (
        "America/Chicago", "en_US.UTF-8", False,
    )  # fmt: skip


def test_what_the_manifest_leaves_out_comes_from_the_host():
    vms = _vms("  docker: true\n")
    assert (vms["plain"].timezone, vms["plain"].locale, vms["plain"].docker) == (
        "Europe/Berlin", "de_DE.UTF-8", True,
    )  # fmt: skip


def test_timezone_locale_and_docker_are_guest_content():
    base = _vms("  docker: false\n")["plain"]
    for changed in (
        _vms("  docker: true\n")["plain"],
        _vms("  docker: false\n", HostLocale("Europe/Lisbon", "de_DE.UTF-8"))["plain"],
        _vms("  docker: false\n", HostLocale("Europe/Berlin", "pt_PT.UTF-8"))["plain"],
    ):
        assert changed.guest_fingerprint != base.guest_fingerprint
        assert changed.fingerprint != base.fingerprint
    # A VM that names both is the same whichever host plans it.
    assert (
        _vms("")["own"].guest_fingerprint
        == _vms("", HostLocale("Etc/UTC", "C.UTF-8"))["own"].guest_fingerprint
    )


def test_detect_reads_the_process_environment(monkeypatch):
    monkeypatch.setenv("TZ", "Pacific/Auckland")
    monkeypatch.setenv("LC_ALL", "fr_FR.UTF-8")
    assert HostLocale.detect() == HostLocale("Pacific/Auckland", "fr_FR.UTF-8")
