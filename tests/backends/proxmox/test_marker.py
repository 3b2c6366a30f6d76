"""The marker's encoding: tags as PVE normalises them, the description block, sizes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sand.backends.proxmox import description as desc
from sand.backends.proxmox import marker as mk
from sand.backends.proxmox import units
from sand.observed import Marker

M = Marker("demo", "web-1", "101", "0123456789abcdef", "fedcba9876543210", "template:t@s")


def test_tags_name_tool_project_and_identity_with_fingerprint() -> None:
    assert mk.marker_tags(M) == ["sand", "sand-101-0123456789abcdef", "sand-project-demo"]
    parsed = mk.parse_tags(mk.join_tags(mk.marker_tags(M)))
    assert parsed.complete
    assert (parsed.project, parsed.identity, parsed.fingerprint) == ("demo", "101", M.fingerprint)


def test_an_unconverged_marker_says_new() -> None:
    fresh = Marker("demo", "web-1", "101", "")
    assert "sand-101-new" in mk.marker_tags(fresh)
    assert mk.parse_tags("sand;sand-101-new;sand-project-demo").fingerprint == ""


def test_merge_keeps_operator_tags_and_replaces_ours() -> None:
    current = "Golden;sand;sand-101-aaaaaaaaaaaaaaaa;sand-project-demo;team-a"
    merged = mk.merge_tags(current, M)
    assert merged == "golden;sand;sand-101-0123456789abcdef;sand-project-demo;team-a"
    # Stored exactly as PVE stores tags: nothing left to diff on the next read.
    assert merged == mk.join_tags(mk.split_tags(merged))


def test_pve_separators_all_parse() -> None:
    assert mk.split_tags("a,b c;d") == ["a", "b", "c", "d"]
    assert mk.split_tags(None) == []


def test_operator_tags_that_merely_look_like_ours_are_kept() -> None:
    assert mk.operator_tags("sandbox;sand-extra;sand") == ["sandbox", "sand-extra"]


def test_description_block_round_trips_and_keeps_operator_text() -> None:
    text = desc.merge_description("Owner: alice\n\nDo not reboot on Fridays.", M, protect=True)
    assert text.startswith("Owner: alice\n\nDo not reboot on Fridays.\n\n```sand\n")
    assert desc.parse_description(text) == M
    assert desc.parse_block(text)["protect"] is True  # type: ignore[index]
    again = desc.merge_description(text, M, protect=True)
    assert again == text  # idempotent: no perpetual rewrite
    assert desc.operator_text(again) == "Owner: alice\n\nDo not reboot on Fridays."


def test_description_without_a_block_has_no_marker() -> None:
    assert desc.parse_description("just notes") is None
    assert desc.parse_description("```sand\nnot json\n```") is None
    assert desc.parse_description(None) is None


def test_sizes_in_pve_units() -> None:
    assert units.memory_mib(8 << 30) == 8192
    assert units.memory_mib(1_000_000) == 1  # rounded up to a whole MiB
    assert units.size_arg(100 << 30) == "100G"
    assert units.size_arg(1536 << 20) == "1536M"
    assert units.size_arg(1000) == "1K"
    assert units.parse_size("4096M") == 4 << 30
    assert units.observed_memory(2048 << 20, 2 << 30) == 2 << 30
    assert units.observed_memory(1 << 20, 1_000_000) == 1_000_000  # what sand set for it
    assert units.observed_disk((10 << 30) + (2 << 20), 10 << 30) == 10 << 30  # storage rounding
    assert units.observed_disk(12 << 30, 10 << 30) == 12 << 30


TAG = st.from_regex(r"[a-z0-9_][a-z0-9_+.\-]{0,12}", fullmatch=True)


@given(st.lists(TAG, max_size=6), st.sampled_from(["", "0123456789abcdef"]))
def test_merging_any_operator_tags_is_stable(operator: list[str], fp: str) -> None:
    marker = Marker("demo", "x", "250", fp)
    once = mk.merge_tags(";".join(operator), marker)
    assert mk.merge_tags(once, marker) == once
    kept = {t for t in operator if not mk.is_sand_tag(t)}
    assert kept <= set(mk.split_tags(once))
    assert mk.parse_tags(once).identity == "250"


@given(st.text(alphabet=st.characters(blacklist_characters="`"), max_size=80))
def test_operator_text_survives_any_rewrite(text: str) -> None:
    merged = desc.merge_description(text, M)
    assert desc.operator_text(merged) == text.strip()
    assert desc.parse_description(merged) == M


def test_the_backend_entry_is_a_listing_visible_tag() -> None:
    east = Marker("demo", "web-1", "101", "", backend="east", incarnation="e1")
    assert "sand-backend-east" in mk.marker_tags(east)
    parsed = mk.parse_tags(mk.join_tags(mk.marker_tags(east)))
    assert parsed.backend == "sand-backend-east" and mk.backend_of_tag(parsed.backend) == "east"
    # Names PVE would not keep as they are (upper case, blanks) become a short hash.
    for name in ("PVE East", "Prod", "a" * 80, "x/y"):
        tag = mk.backend_tag(name)
        assert tag.startswith("sand-backend+") and mk.split_tags(tag) == [tag]
        assert mk.backend_of_tag(tag) == ""
    assert mk.backend_tag("PVE East") != mk.backend_tag("pve east")
    # A backend tag is sand's: replaced on the next write, never kept as an operator's.
    merged = mk.merge_tags("sand-backend-west;team-a", east)
    assert "sand-backend-west" not in merged and "sand-backend-east" in merged
    assert "team-a" in merged


def test_the_incarnation_and_backend_survive_every_description_write() -> None:
    east = Marker("demo", "web-1", "101", "", backend="east", incarnation="e1")
    text = desc.merge_description("Owner: alice", east, protect=True)
    parsed = desc.parse_description(text)
    assert parsed is not None and (parsed.backend, parsed.incarnation) == ("east", "e1")
    block = desc.parse_block(text)
    assert block is not None and block["op"] == "e1" and block["protect"] is True
    assert desc.operator_text(text) == "Owner: alice"


@given(
    backend=st.sampled_from(["pve", "Pve.East", "east-1", ""]),
    other=st.sampled_from(["west", "Pve.West"]),
)
def test_tags_and_description_make_claims_the_one_rule_judges_alike(
    backend: str, other: str
) -> None:
    """What sand writes is judged managed through either source; any other entry's
    name (written as a tag or a hashed tag, or in the block as a name) is another's."""
    from sand.observed import Claim, Ownership, ownership

    mine = Marker("demo", "web-1", "101", "", "", backend=backend)
    tags = mk.parse_tags(mk.join_tags(mk.marker_tags(mine)))
    described = desc.parse_description(desc.render_block(mine))
    here = mk.backend_tag(backend or "pve")

    def judge(claims: list[Claim]) -> Ownership:
        return ownership(claims, identity="101", project="demo", backend=here)

    both = mk.claims(tags, described)
    assert len(both) == 2 and judge(both) is Ownership.MANAGED
    assert judge(mk.claims(tags, None)) is judge(mk.claims(None, described)) is Ownership.MANAGED
    theirs = Marker("demo", "web-1", "101", "", "", backend=other)
    assert judge(mk.claims(tags, desc.parse_description(desc.render_block(theirs)))) is (
        Ownership.OTHER_BACKEND
    )
    their_tags = mk.parse_tags(mk.join_tags(mk.marker_tags(theirs)))
    assert judge(mk.claims(their_tags, described)) is Ownership.OTHER_BACKEND
    # Tags without a project or a vmid claim nothing (only the description speaks).
    assert mk.claims(mk.parse_tags("sand;" + mk.backend_tag(other)), None) == []


def test_the_creation_time_is_a_tag_and_a_block_key() -> None:
    made = Marker("demo", "web-1", "101", "", created_at=1_700_000_000)
    assert "sand-created-1700000000" in mk.marker_tags(made)
    assert mk.parse_tags(mk.join_tags(mk.marker_tags(made))).created_at == 1_700_000_000
    described = desc.parse_description(desc.render_block(made))
    assert described is not None and described.created_at == 1_700_000_000
    # Replaced with the rest of sand's tags, never left behind as an operator's.
    assert mk.merge_tags("sand-created-1;team-a", M) == mk.join_tags(["team-a", *mk.marker_tags(M)])
    assert mk.parse_tags("sand-created-soon").created_at == 0
    assert desc.created_at_of({"created_at": True}) == desc.created_at_of({"created_at": "1"}) == 0
