"""Finding entities in text: exactly, for a whole text, or as far as a stream allows.

A `Catalog` compiles a set of entity kinds once (at start-up); a `Detector` is a cheap
view of it restricted to the kinds one request asked for. Results are the same whichever
way a text is scanned:

- `find(text)`: the whole text is known. The Hyperscan prefilter names the regions worth
  a look and the exact patterns run there only.
- `scan(text, pos, final=False)`: the text may go on (a stream). Besides the entities it
  returns `hold`, the earliest index where a match may still be in progress (a partial
  match, or a complete one too close to the end to be sure of); everything before `hold`
  is settled and every entity returned ends before it.

Each pattern is scanned on its own, leftmost-first; after a match its validator rejects,
the scan goes on one character later. The accepted matches of all kinds are then made
disjoint: earliest first, longest first on a tie, then in catalog order. A rejected match
its kind calls a look-alike (an IBAN with a wrong checksum) takes part as an entity of
its kind's `look_alike` name ("~IBAN"), so that nothing inside it is found, and is then left out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import regex

from gateway.redaction.entities import LOOKAHEAD, EntityKind
from gateway.redaction.first_chars import first_chars, read_chars
from gateway.redaction.in_progress import UNBOUNDED, StreamPlan, scan_patterns
from gateway.redaction.joined import SEPARATOR, separator_blind
from gateway.redaction.prefilter import Prefilter, compilable, max_width, min_width
from gateway.redaction.seen import SeenTexts

LOOK_ALIKE = "~"
"""What starts the kind of a match that keeps other kinds out of its span but is not an
entity (no kind's name can: see `entities.NAME_PATTERN`)."""
_UNJUDGED = object()
_PLANS = 256


class Found(NamedTuple):
    """One entity: `start`/`end` delimit what is replaced, `whole_*` the whole match.

    A named tuple rather than a frozen dataclass: as immutable, and made five times faster
    (a 100 KB request makes about a hundred)."""

    start: int
    end: int
    kind: str
    whole_start: int
    whole_end: int


@dataclass(frozen=True, slots=True)
class _Exact:
    kind: str
    order: int  # position in the catalog, to break ties between kinds deterministically
    pattern: Any  # regex.Pattern[str]; the regex module ships no generic type for it
    check: Callable[[str], bool] | None
    look_alike: Callable[[str], bool] | None
    value_group: bool
    width: int  # the longest match (the text's length when unknown)
    shortest: int  # the shortest whole match (0 when unknown)
    # What every match in ASCII text begins with (None: unknown), for a stream's scan to skip it.
    starts: frozenset[str] | None
    # Its index in the prefilter (-1: not prefiltered), the characters a match in progress at
    # the end of an ASCII text has read (None: unknown), and a search for the first of its
    # first characters (None: any): see `Catalog.scan`.
    prefiltered: int
    tail_chars: str | None
    first_char: Any  # re.Pattern[str] | None

    def accept(self, match: Any) -> Found | None:
        if self.value_group:
            start, end = match.span("v")
        else:
            start, end = match.span()
        if start == end:
            return None
        kind = self.kind
        if self.check is not None:
            value = match.string[start:end]
            if not self.check(value):
                if self.look_alike is None or not self.look_alike(value):
                    return None
                kind = LOOK_ALIKE + kind
        return Found(start, end, kind, match.start(), match.end())

    def judge(self, value: str) -> str | None:
        """The kind `value` is found as (this one or its look-alike), None when it is not."""
        if self.check is None or self.check(value):
            return self.kind
        if self.look_alike is not None and self.look_alike(value):
            return LOOK_ALIKE + self.kind
        return None


class Catalog:
    """Compiled patterns for a set of kinds; build once, share between requests."""

    def __init__(self, kinds: Iterable[EntityKind]) -> None:
        self.kinds = tuple(kinds)
        self.names = frozenset(kind.name for kind in self.kinds)
        prefiltered: list[_Exact] = []
        sources: list[tuple[str, int]] = []
        self._unfiltered: list[_Exact] = []
        ascii_only: set[int] = set()
        for order, kind in enumerate(self.kinds):
            flags = regex.V0 | regex.ASCII | (regex.IGNORECASE if kind.ignore_case else 0)
            for source in kind.patterns:
                compiled = regex.compile(source, flags)
                width = max_width(source)
                # A non-ASCII pattern cannot be prefiltered on "?"-substituted bytes.
                filtered = bool(
                    width
                    and source.isascii()
                    and not kind.ignore_case
                    and (kind.builtin or compilable(source))
                )
                shortest = min_width(source)
                read = read_chars(source, kind.ignore_case) if shortest else None
                starts = first_chars(source, kind.ignore_case)
                exact = _Exact(
                    kind.name,
                    order,
                    compiled,
                    kind.check,
                    kind.look_alike,
                    "v" in compiled.groupindex,
                    width or UNBOUNDED,
                    shortest,
                    starts,
                    len(prefiltered) if filtered else -1,
                    None if read is None else "".join(sorted(read)),
                    None if starts is None else re.compile(f"[{''.join(map(re.escape, sorted(starts)))}]"),
                )
                if filtered and width:
                    if not kind.builtin:
                        # Only the built-in patterns are known to treat "?" as they treat any
                        # non-ASCII character: on a non-ASCII text, a custom one runs unfiltered.
                        ascii_only.add(len(prefiltered))
                    prefiltered.append(exact)
                    sources.append((source, width))
                else:
                    self._unfiltered.append(exact)
        self._prefiltered = tuple(prefiltered)
        self._ascii_only = frozenset(ascii_only)  # indexes into _prefiltered
        self._all = (*self._prefiltered, *self._unfiltered)
        self._prefilter = Prefilter(sources)
        self._orders = {kind.name: order for order, kind in enumerate(self.kinds)}
        self._orders.update({LOOK_ALIKE + name: order for name, order in self._orders.items()})
        self.seen: SeenTexts[Found] = SeenTexts()
        self._joinable: dict[frozenset[str], bool] = {}
        self._plans: dict[frozenset[str], StreamPlan] = {}  # per set of kinds a stream scans

    def joinable(self, names: frozenset[str]) -> bool:
        """Whether one scan of strings joined by `joined.SEPARATOR` finds an entity of these
        kinds whenever a scan of any of them alone would."""
        known = self._joinable.get(names)
        if known is None:
            known = self._joinable[names] = all(
                separator_blind(pattern)
                for kind in self.kinds
                if kind.name in names
                for pattern in kind.patterns
            )
        return known

    def detector(self, names: Iterable[str] | None = None, *, per_request: bool = False) -> Detector:
        """A detector for the kinds named (all of this catalog's when `names` is None).

        A `per_request` detector remembers its validators' verdicts for as long as it lives
        (the texts of one request and its answer repeat their entities): make one per
        request, never one that lives longer, since it keeps the values it checked."""
        names = self.names if names is None else frozenset(names) & self.names
        return Detector(self, names, {} if per_request else None)

    def find(self, text: str, names: frozenset[str], verdicts: Verdicts | None = None) -> list[Found]:
        hits: list[_Hit] = []
        prefiltered = self._prefiltered
        everywhere: Sequence[Sequence[int]] = ((0, len(text)),)
        if text.isascii() or not self._ascii_only:
            for index, regions in self._prefilter.regions(text).items():
                exact = prefiltered[index]
                if exact.kind in names:
                    _confirm(exact, text, regions, hits, _verdicts_of(exact, verdicts))
        else:
            candidates = self._prefilter.regions(text)
            for index, exact in enumerate(prefiltered):
                if exact.kind in names:
                    where = everywhere if index in self._ascii_only else candidates.get(index)
                    if where:
                        _confirm(exact, text, where, hits, _verdicts_of(exact, verdicts))
        for exact in self._unfiltered:
            if exact.kind in names:
                _confirm(exact, text, everywhere, hits, _verdicts_of(exact, verdicts))
        if not hits:
            return []
        if len(hits) == 1:
            return [] if hits[0][4].kind[0] == LOOK_ALIKE else [hits[0][4]]
        # disjoint(), on tuples that sort by themselves: no key function, no lookups.
        hits.sort()
        result: list[Found] = []
        end = -1
        for start, _, _, _, found in hits:
            if start >= end:
                if found.kind[0] != LOOK_ALIKE:
                    result.append(found)
                end = found.end
        return result

    def scan(self, text: str, pos: int, final: bool, names: frozenset[str]) -> tuple[list[Found], int]:
        plan = self._plans.get(names)
        if plan is None:
            plan = self._plan(names)
        matches, accepted, hold = scan_patterns(plan, self._prefilter, text, pos, final)
        if not matches:
            return [], hold  # most of a stream's scans: nothing complete, at most a hold
        # A match that straddles `hold` is not settled either: hold from its start.
        settled = False
        while not settled:
            settled = True
            for match in matches:
                if match.start() < hold < match.end():
                    hold = match.start()
                    settled = False
        settled_found = disjoint([f for f in accepted if f.whole_end <= hold], self._order)
        return [f for f in settled_found if f.kind[0] != LOOK_ALIKE], hold

    def _order(self, kind: str) -> int:
        return self._orders[kind]

    def _plan(self, names: frozenset[str]) -> StreamPlan:
        if len(self._plans) >= _PLANS:  # a few sets of kinds in practice; bounded all the same
            self._plans.clear()
        plan = self._plans[names] = StreamPlan(self._all, names)
        return plan


# (start, start - end, catalog order, arrival, entity): sorts as `disjoint` orders, ties stable.
_Hit = tuple[int, int, int, int, Found]

Verdicts = dict[str, dict[str, str | None]]
"""Per kind, its validators' verdicts on each value they were given: the kind the value is
found as (`_Exact.judge`). Per kind, not per validator: kinds share one (`not_placeholder`)."""


def _verdicts_of(exact: _Exact, verdicts: Verdicts | None) -> dict[str, str | None]:
    if verdicts is None or exact.check is None:
        return {}  # for this one text: a text repeats its entities
    found = verdicts.get(exact.kind)
    if found is None:
        found = verdicts[exact.kind] = {}
    return found


def _confirm(
    exact: _Exact,
    text: str,
    regions: Iterable[Sequence[int]],
    into: list[_Hit],
    verdicts: dict[str, str | None],
) -> None:
    """The accepted matches starting in each region (start, end), as `_Exact.accept` and `_next`
    would find them, appended to `into`. The text is cut a whole match's width (and the
    look-ahead) beyond a region, so that no match starting in it ever sees the cut.

    Every match starting in a region also ends in it (the prefilter reported its end, or
    one character after it for a consumed look-ahead), so the search stops as soon as what
    is left of the region is shorter than the pattern's shortest match: a region holding
    one entity costs one search, not a second one over a whole match's width."""
    search = exact.pattern.search
    check = exact.check
    judge = exact.judge
    value_group = exact.value_group
    kind = exact.kind
    order = exact.order
    reach = exact.width + LOOKAHEAD
    shortest = exact.shortest
    size = len(text)
    append = into.append
    for region_start, region_end in regions:
        pos = region_start
        endpos = min(size, region_end + reach)
        last = region_end - shortest  # the last start that leaves room for a match
        while pos <= last and (match := search(text, pos, endpos)) is not None:
            whole_start, whole_end = match.span()
            if whole_start >= region_end:
                break
            start, end = match.span("v") if value_group else (whole_start, whole_end)
            if start == end:
                pos = whole_start + 1
                continue
            found_as = kind
            if check is not None:
                value = text[start:end]
                judged = verdicts.get(value, _UNJUDGED)
                if judged is _UNJUDGED:
                    judged = verdicts[value] = judge(value)
                if judged is None:
                    pos = whole_start + 1
                    continue
                found_as = judged  # type: ignore[assignment]
            append(
                (start, start - end, order, len(into), Found(start, end, found_as, whole_start, whole_end))
            )
            pos = whole_end if whole_end > whole_start else whole_start + 1


def disjoint(found: Sequence[Found], order: Callable[[str], int]) -> list[Found]:
    """Non-overlapping entities: earliest first; on the same start, longest; then catalog order."""
    if len(found) < 2:
        return list(found)
    result: list[Found] = []
    end = -1
    for item in sorted(found, key=lambda f: (f.start, f.start - f.end, order(f.kind))):
        if item.start >= end:
            result.append(item)
            end = item.end
    return result


class Detector:
    """A `Catalog` restricted to some kinds: what one request detects."""

    __slots__ = ("_verdicts", "catalog", "names")

    def __init__(self, catalog: Catalog, names: frozenset[str], verdicts: Verdicts | None = None) -> None:
        self.catalog = catalog
        self.names = names
        self._verdicts = verdicts

    def find(self, text: str) -> list[Found]:
        if not self.names:
            return []
        return self.catalog.find(text, self.names, self._verdicts)

    def none_in(self, texts: Sequence[str]) -> bool:
        """Whether no text holds an entity of these kinds: for texts known to be many and
        short, one scan of them joined (`joined.py`) where the kinds' patterns allow it."""
        if not self.names or not texts:
            return True
        catalog = self.catalog
        if len(texts) > 1 and catalog.joinable(self.names):
            return not catalog.find(SEPARATOR.join(texts), self.names, self._verdicts)
        return not any(catalog.find(text, self.names, self._verdicts) for text in texts)

    def find_remembered(self, text: str) -> Sequence[Found]:
        """`find`, answered from the catalog's `SeenTexts` when this long text was scanned
        before for these kinds: for the texts that recur from request to request (a
        conversation's history), not for answers."""
        if not self.names:
            return ()
        return self.catalog.seen.find(
            text, self.names, lambda: self.catalog.find(text, self.names, self._verdicts)
        )

    def scan(self, text: str, pos: int, final: bool = False) -> tuple[list[Found], int]:
        if not self.names:
            return [], len(text)
        return self.catalog.scan(text, pos, final, self.names)


def replaced(text: str, found: Sequence[Found], replacement: Callable[[Found, str], str]) -> str:
    """`text` with each entity replaced by `replacement(entity, its text)`."""
    if not found:
        return text
    parts: list[str] = []
    last = 0
    for item in found:
        parts.append(text[last : item.start])
        parts.append(replacement(item, text[item.start : item.end]))
        last = item.end
    parts.append(text[last:])
    return "".join(parts)
