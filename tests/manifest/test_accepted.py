"""What the hostile-input rules must keep accepting, and what `preserve` means."""

from __future__ import annotations

from pathlib import Path

import pytest

from sand.desired.spec import build_desired
from sand.errors import ManifestError
from sand.manifest import load_manifest, parse_manifest
from sand.manifest.values import hostname_problem, repo_url_problem
from tests.manifest.test_hostile import BASE, LAPTOP, PRESERVE, URL

GOOD_URLS = [
    "https://github.com/acme/app.git",
    "https://gitlab.example.com:8443/group/sub/app.git",
    "https://[2001:db8::1]/acme/app.git",
    "http://git.lan/app",
    "ssh://git@github.com/acme/app.git",
    "ssh://git@[::1]:2222/srv/app.git",
    "ssh://host.example/~me/app.git",
    "git://git.kernel.org/pub/scm/git/git.git",
    "git@github.com:acme/app.git",
    "github.com:acme/app",
    "me@10.0.0.5:repos/app.git",
    "git@[2001:db8::1]:app.git",
    "file:///srv/git/app.git",
    "file://localhost/srv/git/app.git",
    "https://github.com/acme/app%20x.git",
]


@pytest.mark.parametrize("url", GOOD_URLS)
def test_every_allowed_url_form_validates(url: str) -> None:
    assert repo_url_problem(url) is None
    parse_manifest(BASE.replace(URL, f"    url: '{url}'\n"))


@pytest.mark.parametrize(
    "host", ["pve.test", "pve", "PVE-1.example.org.", "10.0.0.5", "2001:db8::1", "[2001:db8::1]"]
)
def test_host_names_and_addresses_validate(host: str) -> None:
    assert hostname_problem(host) is None
    parse_manifest(BASE.replace("    host: pve.test\n", f"    host: '{host}'\n"))


def test_yaml_merge_keys_with_an_override_are_accepted() -> None:
    text = BASE.replace(
        "  - name: agent\n    memory: 8GiB\n",
        "  - &agent\n"
        "    name: agent\n"
        "    memory: 8GiB\n"
        "    cpus: 2\n"
        "    preserve: [~/src]\n"
        "  - <<: *agent\n"
        "    name: agent-2\n"
        "    cpus: 4\n",
    )
    manifest = parse_manifest(text)
    second = manifest.vms[-1]
    assert (second.name, second.cpus, second.memory) == ("agent-2", 4, 8 << 30)
    assert second.preserve == ["~/src"]


def test_merge_keys_in_a_backend_are_accepted() -> None:
    text = BASE.replace(
        "  pve:\n    type: proxmox\n",
        "  pve: &pve\n    type: proxmox\n",
    ).replace(LAPTOP, LAPTOP + "  pve-b:\n    <<: *pve\n    pool: sand-b\n")
    manifest = parse_manifest(text)
    assert manifest.backends["pve-b"].pool == "sand-b"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("memory", "disk"),
    [("64MiB", "1GiB"), ("4TiB", "64TiB"), ("1.5GiB", "20GiB"), ("512M", "40G"), ("8 GiB", "1T")],
)
def test_sizes_at_and_inside_the_bounds_validate(memory: str, disk: str) -> None:
    text = BASE.replace("  memory: 4GiB\n", f"  memory: {memory}\n").replace(
        "  disk: 40GiB\n", f"  disk: {disk}\n"
    )
    parse_manifest(text)


@pytest.mark.parametrize("template", ["100", "999999999", "debian-12-cloud", "tpl.v2"])
def test_template_vmids_in_range_and_names_validate(template: str) -> None:
    parse_manifest(BASE.replace("    template: 9000\n", f"    template: {template}\n"))
    parse_manifest(
        BASE.replace("    memory: 8GiB\n", f"    memory: 8GiB\n    image: '{template}'\n")
    )


def test_distinct_pools_homes_and_users_are_separate_backends(tmp_path: Path) -> None:
    text = BASE.replace(
        LAPTOP,
        LAPTOP
        + "  pve-b:\n    type: proxmox\n    host: pve.test\n    node: pve1\n    pool: sand-b\n"
        "    storage: local-lvm\n    template: 9000\n    token_file: t\n    identity: i\n"
        "  pve-c:\n    type: proxmox\n    host: pve.test\n    port: 8007\n    node: pve1\n"
        "    pool: sand\n    storage: local-lvm\n    template: 9000\n    token_file: t\n"
        "    identity: i\n"
        "  laptop-b:\n    type: lima\n    lima_home: lima-b\n"
        "  remote-b:\n    type: lima\n    ssh: {host: build.lan, user: other}\n"
        "  remote-c:\n    type: lima\n    ssh: {host: build.lan, user: me, lima_home: .lima-c}\n",
    )
    path = tmp_path / "sand.yaml"
    path.write_text(text)
    assert len(load_manifest(path).manifest.backends) == 8


def test_a_relative_lima_home_is_relative_to_the_manifest(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    text = BASE.replace(
        LAPTOP, LAPTOP + f"  laptop-b:\n    type: lima\n    lima_home: {tmp_path}/x\n"
    )
    text = text.replace(LAPTOP, "  laptop:\n    type: lima\n    lima_home: ../x\n")
    path = tmp_path / "a" / "sand.yaml"
    path.write_text(text)
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert "backend 'laptop-b' would see backend 'laptop''s VMs" in str(info.value)
    elsewhere = tmp_path / "sand.yaml"  # there, ../x is another directory
    elsewhere.write_text(text)
    load_manifest(elsewhere)


PRESERVING = BASE.replace(
    "  packages: [jq]\n", "  packages: [jq]\n  preserve: [~/.claude, ~/src/]\n"
)


def test_preserve_paths_are_normalised_and_the_vm_list_replaces_the_default() -> None:
    text = PRESERVING.replace(PRESERVE, "    preserve: ['~', ~/work/]\n")
    by_name = {vm.name: vm for vm in build_desired(parse_manifest(text)).vms}
    assert by_name["dev"].preserve == ("~", "~/work")
    assert by_name["agent"].preserve == ("~/.claude", "~/src")
    text = PRESERVING.replace(PRESERVE, "    preserve: []\n")
    assert {vm.name: vm.preserve for vm in build_desired(parse_manifest(text)).vms}["dev"] == ()


def test_what_is_preserved_is_in_neither_fingerprint() -> None:
    before = build_desired(parse_manifest(BASE)).vms
    after = build_desired(parse_manifest(PRESERVING.replace(PRESERVE, "    preserve: ['~']\n"))).vms
    assert [vm.preserve for vm in before] != [vm.preserve for vm in after]
    for old, new in zip(before, after, strict=True):
        assert (old.fingerprint, old.guest_fingerprint) == (new.fingerprint, new.guest_fingerprint)


def test_a_bare_tilde_is_yaml_null_and_the_error_says_to_quote_it() -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest(BASE.replace(PRESERVE, "    preserve: [~]\n"), "m.yaml")
    assert [str(p) for p in info.value.problems] == [
        "m.yaml:42:16: vms[0].preserve[0]: a bare ~ is YAML's null: write '~' in quotes"
    ]


def test_merge_keys_keep_yaml_precedence_and_a_key_written_twice_is_still_refused() -> None:
    agent = "  - name: agent\n    memory: 8GiB\n"
    text = BASE.replace(
        agent,
        "  - &a {name: agent, cpus: 2, memory: 8GiB}\n"
        "  - &b {name: other, cpus: 3, state: stopped}\n"
        "  - <<: [*a, *b]\n    name: third\n",
    )
    third = parse_manifest(text).vms[-1]
    assert (third.name, third.cpus, third.state) == ("third", 2, "stopped")  # first listed wins
    twice = BASE.replace(agent, "  - <<: {cpus: 2}\n    name: agent\n    name: again\n")
    with pytest.raises(ManifestError) as info:
        parse_manifest(twice, "m.yaml")
    assert [str(p) for p in info.value.problems] == ["m.yaml:45:5: duplicate key 'name'"]


def test_a_merge_of_a_merge_keeps_precedence_and_a_merge_of_a_scalar_is_located() -> None:
    agent = "  - name: agent\n    memory: 8GiB\n"
    text = BASE.replace(
        agent,
        "  - &a {name: agent, cpus: 2, memory: 8GiB}\n"
        "  - &b {<<: *a, name: other, cpus: 3}\n"
        "  - <<: [*b, {cpus: 5, state: stopped}]\n    name: third\n",
    )
    third = parse_manifest(text).vms[-1]
    assert (third.name, third.cpus, third.memory, third.state) == ("third", 3, 8 << 30, "stopped")
    scalar = BASE.replace(agent, "  - <<: 3\n    name: agent\n")
    with pytest.raises(ManifestError) as info:
        parse_manifest(scalar, "m.yaml")
    assert [str(p) for p in info.value.problems] == [
        "m.yaml:43:9: a merge key (<<) takes a mapping or a list of mappings"
    ]


def test_idle_of_a_vm_replaces_the_defaults_whole_and_never_turns_it_off() -> None:
    text = BASE.replace(
        "  packages: [jq]\n", "  packages: [jq]\n  idle: {after: 90m, then: stop}\n"
    )
    text = text.replace(PRESERVE, PRESERVE + "    idle: never\n")
    by_name = {vm.name: vm for vm in build_desired(parse_manifest(text)).vms}
    assert by_name["dev"].idle is None
    agent = by_name["agent"].idle
    assert agent is not None
    assert (agent.after, agent.then, agent.stop_waiting, agent.text) == (5400, "stop", False, "90m")
    own = text.replace("    idle: never\n", "    idle: {stopWaiting: true}\n")
    dev = {vm.name: vm for vm in build_desired(parse_manifest(own)).vms}["dev"].idle
    assert dev is not None  # its own: the defaults' after/then are not merged in
    assert (dev.after, dev.then, dev.stop_waiting) == (7200, "suspend", True)


def test_idle_is_in_neither_fingerprint() -> None:
    before = build_desired(parse_manifest(BASE)).vms
    text = BASE.replace("  packages: [jq]\n", "  packages: [jq]\n  idle: {after: 2h}\n")
    after = build_desired(parse_manifest(text)).vms
    for old, new in zip(before, after, strict=True):
        assert new.idle is not None and old.idle is None
        assert (old.fingerprint, old.guest_fingerprint) == (new.fingerprint, new.guest_fingerprint)
