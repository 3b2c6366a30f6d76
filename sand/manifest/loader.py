"""Read a manifest file into a validated :class:`Manifest`, or a ManifestError
listing every problem as ``FILE:LINE:COL: message``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

from pydantic import BaseModel, ValidationError

from sand.errors import ManifestError, Problem
from sand.manifest import content as c
from sand.manifest import generators as g
from sand.manifest import models as m
from sand.manifest.backends import CONFIGS, SshTarget
from sand.manifest.collisions import check_collisions
from sand.manifest.idle import Idle
from sand.manifest.models import Manifest
from sand.manifest.references import check_references
from sand.manifest.yamlmarks import MarkedData, Path, load_marked

MAX_BYTES = 4 << 20


@dataclass(frozen=True)
class LoadedManifest:
    manifest: Manifest
    path: FsPath
    text: str
    # Where every key and value stood, so later layers (preflight) can point at a field.
    marks: MarkedData | None = field(default=None, compare=False, repr=False)
    # Where relative host paths in it (token_file, identity, secret files) are found,
    # when not beside it: ``sand sync`` reads a manifest out of a git revision, and
    # the files it names come from the host, never from the repository.
    host_dir: FsPath | None = field(default=None, compare=False)

    @property
    def directory(self) -> FsPath:
        return self.host_dir if self.host_dir is not None else self.path.parent

    @property
    def from_repository(self) -> bool:
        """Read out of a git revision (``sand sync``): whoever can commit wrote it, so
        it only names secrets; their sources are the host's (``sand.manifest.hostsecrets``)."""
        return self.host_dir is not None


def load_manifest(path: str | FsPath) -> LoadedManifest:
    file = FsPath(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        missing = " (give its path, or -f FILE)" if isinstance(exc, FileNotFoundError) else ""
        raise ManifestError(
            [Problem(str(file), 1, 1, f"cannot read: {exc.strerror}")],
            summary=f"cannot read the manifest {file}: {exc.strerror}{missing}",
        ) from None
    return load_manifest_bytes(raw, file)


def load_manifest_bytes(raw: bytes, file: FsPath) -> LoadedManifest:
    """A manifest read already (``sand validate -``: stdin), named ``file`` in problems;
    relative paths in it are found from ``file``'s directory."""
    if len(raw) > MAX_BYTES:
        raise ManifestError([Problem(str(file), 1, 1, "the manifest is larger than 4 MiB")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Located at the byte itself: "1:1" sent a person reading a whole file for it.
        line_start = raw.rfind(b"\n", 0, exc.start) + 1
        line = raw.count(b"\n", 0, exc.start) + 1
        column = len(raw[line_start : exc.start].decode("utf-8", "replace")) + 1
        byte = raw[exc.start : exc.start + 1].hex()
        problem = Problem(str(file), line, column, f"not UTF-8: byte 0x{byte}: {exc.reason}")
        raise ManifestError([problem]) from None
    manifest, marks = parse_marked(text, str(file))
    return LoadedManifest(manifest, file, text, marks)


def parse_manifest(text: str, filename: str = "sand.yaml") -> Manifest:
    return parse_marked(text, filename)[0]


def parse_marked(text: str, filename: str = "sand.yaml") -> tuple[Manifest, MarkedData]:
    marked, yaml_problems = load_marked(text)
    problems = [Problem(filename, p.mark.line, p.mark.column, p.message) for p in yaml_problems]
    if problems:
        raise ManifestError(problems)
    if not isinstance(marked.data, dict):
        raise ManifestError([Problem(filename, 1, 1, "the manifest must be a mapping of keys")])
    problems = [
        _problem(filename, marked, path, message) for path, message in check_references(marked.data)
    ]
    problems += [
        _problem(filename, marked, path, message, key)
        for path, message, key in check_collisions(marked.data, str(FsPath(filename).parent))
    ]
    try:
        manifest = Manifest.model_validate(marked.data)
    except ValidationError as exc:
        problems += validation_problems(exc, marked, filename)
    if problems:
        raise ManifestError(problems)
    return manifest, marked


def _problem(
    filename: str, marked: MarkedData, path: Path, message: str, key: bool = False
) -> Problem:
    mark = marked.mark_for(path, key=key)
    return Problem(filename, mark.line, mark.column, message)


def validation_problems(exc: ValidationError, marked: MarkedData, filename: str) -> list[Problem]:
    problems: list[Problem] = []
    for error in exc.errors(include_url=False):
        path = _data_path(marked.data, error["loc"])
        kind = error["type"]
        dotted = _dotted(path)
        if kind == "extra_forbidden":
            key = str(path[-1])
            hint = _did_you_mean(key, _allowed_keys(marked.data, path[:-1]))
            problems.append(_problem(filename, marked, path, f"unknown key {key!r}{hint}", True))
        elif kind == "missing":
            problems.append(
                _problem(filename, marked, path[:-1], f"missing required key {str(path[-1])!r}")
            )
        else:
            message = str(error["msg"]).removeprefix("Value error, ")
            where = f"{dotted}: " if dotted else ""
            problems.append(_problem(filename, marked, path, where + message, key=_is_key(error)))
    return problems


def _is_key(error: Any) -> bool:
    return "[key]" in error["loc"]


def _data_path(data: Any, loc: tuple[Any, ...]) -> Path:
    """Drop the parts of a pydantic location that are not in the data (union tags, '[key]')."""
    path: list[str | int] = []
    node = data
    for part in loc:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_dict or in_list:
            path.append(part)
            node = node[part]
        elif part == "[key]" or (isinstance(part, str) and " " in part):
            continue  # no key of a manifest holds a space: a union's tag
        elif isinstance(node, dict) and isinstance(part, str) and part not in CONFIGS:
            # A key that is absent (missing) or the offending extra key itself.
            path.append(part)
            node = None
        else:
            continue
    return tuple(path)


def _dotted(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _allowed_keys(data: Any, path: Path) -> list[str]:
    model = _model_at(path, data)
    if model is None:
        return []
    return [f.alias or name for name, f in model.model_fields.items()]


def _model_at(path: Path, data: Any) -> type[BaseModel] | None:

    table: dict[Path, type[BaseModel]] = {
        (): m.Manifest,
        ("defaults",): m.Defaults,
        ("defaults", "idle"): Idle,
    }
    if path in table:
        return table[path]
    head = path[:1]
    if head == ("vms",) and len(path) == 2:
        return m.VM
    if head == ("vms",) and len(path) == 3 and path[2] == "idle":
        return Idle
    if head == ("vms",) and len(path) == 4 and path[2] == "secrets":
        return m.SecretUse
    if head == ("vms",) and len(path) == 4 and path[2] == "ports":
        return m.Port
    if head == ("generators",) and len(path) in (2, 3):
        return _GENERATOR_PARTS.get(path[2] if len(path) == 3 else "")
    if head == ("repos",) and len(path) == 2:
        return c.Repo
    if head == ("secrets",) and len(path) == 2:
        return c.Secret
    if head == ("secrets",) and len(path) == 3:
        return c.SecretSource
    if head == ("backends",) and len(path) >= 2:
        node = data.get("backends", {}).get(path[1]) if isinstance(data, dict) else None
        kind = node.get("type") if isinstance(node, dict) else None
        if len(path) == 3 and path[2] == "ssh":
            return SshTarget
        if len(path) == 2:
            return CONFIGS.get(str(kind))
    return None


_GENERATOR_PARTS: dict[str | int, type[BaseModel]] = {
    "": g.Generator,
    "vm": g.VMTemplate,
    "branches": g.BranchSource,
    "github": g.GitHubSource,
}


def _did_you_mean(key: str, allowed: list[str]) -> str:
    import difflib  # here, not at the top: only a manifest with an unknown key asks

    close = difflib.get_close_matches(key, allowed, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
