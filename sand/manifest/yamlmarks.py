"""YAML → plain data, remembering where every key and value stood.

PyYAML's ``safe_load`` throws the marks away, and pydantic reports errors by
path (``('vms', 2, 'memory')``); this module keeps a path → (line, column)
table so each error can name the exact spot in the file. It also refuses what
``safe_load`` silently accepts: duplicate keys (the later one would win) and
alias bombs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

Path = tuple[str | int, ...]
# libyaml's parser keeps node marks too and is ~5x faster on large fleets.
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
MAX_NODES = 200_000


@dataclass(frozen=True)
class Mark:
    line: int  # 1-based
    column: int  # 1-based

    @staticmethod
    def of(mark: yaml.Mark | None) -> Mark:
        if mark is None:
            return Mark(1, 1)
        return Mark(mark.line + 1, mark.column + 1)


@dataclass
class MarkedData:
    data: Any
    # The parser's own marks (0-based), made into a Mark only for a problem to report:
    # a valid 1,000-VM manifest has thousands of them and reports none.
    value_marks: dict[Path, yaml.Mark] = field(default_factory=dict)
    key_marks: dict[Path, yaml.Mark] = field(default_factory=dict)

    def mark_for(self, path: Path, *, key: bool = False) -> Mark:
        """The closest mark for ``path``: the spot itself, else its nearest parent."""
        table = self.key_marks if key else self.value_marks
        probe = path
        while probe:
            if probe in table:
                return Mark.of(table[probe])
            if probe in self.value_marks:
                return Mark.of(self.value_marks[probe])
            probe = probe[:-1]
        return Mark.of(self.value_marks.get(()))


class YamlProblem(Exception):
    def __init__(self, mark: Mark, message: str) -> None:
        self.mark = mark
        self.message = message
        super().__init__(message)


class _Converter:
    def __init__(self, out: MarkedData, limit: int) -> None:
        self.out = out
        self.count = 0
        self.limit = limit  # the document's own values and what aliases may add
        self.scalars = SafeConstructor()
        self.problems: list[YamlProblem] = []
        # Each mapping's resolved pairs, so a mapping merged many times (through
        # aliases) is resolved once: merges must not become an alias bomb.
        self.resolved: dict[int, dict[str, _Pair]] = {}

    def convert(self, node: yaml.Node, path: Path) -> Any:
        self.count += 1
        if self.count > self.limit:
            # Aliases can expand a small file into an enormous tree.
            raise YamlProblem(Mark.of(node.start_mark), "the manifest is too large (alias bomb?)")
        self.out.value_marks.setdefault(path, node.start_mark)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(item, (*path, i)) for i, item in enumerate(node.value)]
        assert isinstance(node, yaml.ScalarNode)
        if node.tag == _STR_TAG:  # what SafeConstructor makes of it, without its bookkeeping
            return node.value
        try:
            return self.scalars.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None) or node.start_mark
            raise YamlProblem(Mark.of(mark), f"cannot read this value: {_reason(exc)}") from None
        except (ValueError, OverflowError, TypeError) as exc:
            raise YamlProblem(Mark.of(node.start_mark), f"cannot read this value: {exc}") from None

    def _mapping(self, node: yaml.MappingNode, path: Path) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, (key_node, value_node) in self._effective_pairs(node, depth=0).items():
            self.out.key_marks[(*path, key)] = key_node.start_mark
            result[key] = self.convert(value_node, (*path, key))
        return result

    def _effective_pairs(self, node: yaml.MappingNode, depth: int) -> dict[str, _Pair]:
        """The pairs a mapping means, merge keys (``<<``) resolved by YAML's rule.

        Done here rather than by PyYAML's ``flatten_mapping``: the order that
        function leaves the pairs in changed between PyYAML releases (6.0.4), and
        precedence must not follow the installed version. The rule: a key written
        in the mapping beats any merged one (``<<: *base`` followed by overrides),
        and of several merged mappings the first listed wins. Only a key written
        twice in the mapping itself is a mistake.
        """
        if id(node) in self.resolved:
            return self.resolved[id(node)]
        if depth > 64:
            raise YamlProblem(Mark.of(node.start_mark), "merge keys nest too deeply")
        merged: dict[str, _Pair] = {}
        own: dict[str, _Pair] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                for source in _merge_sources(value_node):
                    for key, pair in self._effective_pairs(source, depth + 1).items():
                        merged.setdefault(key, pair)
                continue
            key = _key_of(key_node)
            if key in own:
                self.problems.append(
                    YamlProblem(Mark.of(key_node.start_mark), f"duplicate key {key!r}")
                )
                continue
            own[key] = (key_node, value_node)
        # Merged keys first, as PyYAML itself lays them out; the written value wins.
        pairs = {key: pair for key, pair in merged.items() if key not in own}
        pairs.update(own)
        self.resolved[id(node)] = pairs
        return pairs


_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
_Pair = tuple[yaml.Node, yaml.Node]


def _merge_sources(value: yaml.Node) -> list[yaml.MappingNode]:
    """The mappings a ``<<`` brings in, in the order they take precedence."""
    if isinstance(value, yaml.MappingNode):
        return [value]
    if isinstance(value, yaml.SequenceNode) and all(
        isinstance(item, yaml.MappingNode) for item in value.value
    ):
        return list(value.value)
    raise YamlProblem(
        Mark.of(value.start_mark), "a merge key (<<) takes a mapping or a list of mappings"
    )


def _key_of(key_node: yaml.Node) -> str:
    if not isinstance(key_node, yaml.ScalarNode):
        raise YamlProblem(Mark.of(key_node.start_mark), "keys must be plain strings")
    if key_node.tag != "tag:yaml.org,2002:str":
        raise YamlProblem(Mark.of(key_node.start_mark), _not_a_string(key_node))
    return str(key_node.value)


# What a plain key resolved to, by YAML 1.1's rules, in a person's words.
_KEY_KINDS = {
    "tag:yaml.org,2002:bool": "a boolean",
    "tag:yaml.org,2002:int": "a number",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:null": "null",
    "tag:yaml.org,2002:timestamp": "a date",
}


def _not_a_string(key_node: yaml.ScalarNode) -> str:
    kind = _KEY_KINDS.get(key_node.tag, "not a string")
    why = f"key {key_node.value!r} must be a string; YAML reads it as {kind}"
    if key_node.tag == "tag:yaml.org,2002:bool":
        # on/off/yes/no/y/n: YAML 1.1's booleans, a trap for `on:` in particular.
        why += f" (on, off, yes and no are YAML 1.1 booleans): quote it, '{key_node.value}'"
    return why


def _reason(exc: BaseException) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        return " ".join(x for x in (exc.context, exc.problem) if x) or "invalid YAML"
    return str(exc) or type(exc).__name__


def _mark_at(text: str, index: int) -> Mark:
    """The line and column of character ``index`` of ``text``."""
    index = max(0, min(index, len(text)))
    return Mark(text.count("\n", 0, index) + 1, index - (text.rfind("\n", 0, index) + 1) + 1)


def _expansion_problem(root: yaml.Node, length: int) -> tuple[YamlProblem | None, int]:
    """Refuse a document whose aliases (and merge keys, which copy whole mappings) add
    more than MAX_NODES values to those it writes itself, before anything is expanded:
    the size of each node is counted once, however many aliases point at it, so a bomb
    of 10**30 values is refused as fast as a small file is read. Only what aliases add
    counts: a long manifest without one is no bomb, and is told its own problems.
    Also returns how many nodes the document writes (``length``: its characters)."""
    # Sizes are capped (a bomb's would be huge numbers) above anything that matters: a
    # text writes fewer than four nodes per character (a lone ``?`` writes a mapping and
    # two nulls), so no document's own nodes and allowance reach the cap.
    cap = 4 * length + MAX_NODES + 4
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        sizes[id(node)] = 1  # a node that holds itself counts once
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        sizes[id(node)] = total = min(total, cap)
        return total

    try:
        total = size(root)
    except RecursionError:
        return YamlProblem(Mark(1, 1), "the manifest is nested too deeply"), 0
    own = len(sizes)  # every node was visited once
    if total <= own + MAX_NODES:
        return None, own
    # Point at the smallest node that is too big alone: the alias or anchor to look at.
    node = root
    while True:
        children = node.value if isinstance(node.value, list) else []
        flat = [c for pair in children for c in (pair if isinstance(pair, tuple) else (pair,))]
        big = [c for c in flat if sizes.get(id(c), 0) > MAX_NODES]
        if not big:
            break
        node = big[0]
    return YamlProblem(
        Mark.of(node.start_mark),
        f"the manifest expands to more than {MAX_NODES} values through its aliases, "
        f"beyond the {own} it writes (an alias bomb?)",
    ), own


def load_marked(text: str) -> tuple[MarkedData, list[YamlProblem]]:
    """Parse one YAML document; return the data with marks and any problems found."""
    out = MarkedData(data=None)
    try:
        nodes = list(yaml.compose_all(text, Loader=_LOADER))
    except yaml.MarkedYAMLError as exc:
        return out, [YamlProblem(Mark.of(exc.problem_mark or exc.context_mark), _reason(exc))]
    except yaml.reader.ReaderError as exc:  # a character YAML forbids (NUL, a control)
        found = text.find(chr(exc.character)) if isinstance(exc.character, int) else -1
        where = _mark_at(text, found if found >= 0 else exc.position)
        return out, [
            YamlProblem(
                where,
                f"character U+{ord(chr(exc.character)):04X} is not allowed in YAML ({exc.reason})",
            )
        ]
    except yaml.YAMLError as exc:
        return out, [YamlProblem(Mark(1, 1), _reason(exc))]
    except (ValueError, RecursionError) as exc:
        return out, [YamlProblem(Mark(1, 1), f"invalid YAML: {exc}")]
    if len(nodes) != 1:
        message = "the manifest is empty" if not nodes else "the manifest holds several documents"
        mark = Mark.of(nodes[1].start_mark) if len(nodes) > 1 else Mark(1, 1)
        return out, [YamlProblem(mark, message)]
    bomb, own = _expansion_problem(nodes[0], len(text))
    if bomb is not None:
        return out, [bomb]
    converter = _Converter(out, limit=own + MAX_NODES)
    try:
        out.data = converter.convert(nodes[0], ())
    except YamlProblem as problem:
        return out, [*converter.problems, problem]
    except RecursionError:
        return out, [YamlProblem(Mark(1, 1), "the manifest is nested too deeply")]
    return out, converter.problems
