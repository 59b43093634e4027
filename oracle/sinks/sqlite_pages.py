"""SQLite snapshots that read only the rows on pages that changed since the last snapshot.

A SQLite table is a b-tree of pages; its rows sit on the leaf pages, in rowid order. A snapshot
keeps the database's pages as its read transaction saw them, and, for every table whose primary
key is its rowid, which leaf page holds which rows. The pages come from the main file, read
under the transaction's shared lock (no writer may change the file while it is held) through
the descriptor SQLite itself opened, in rollback-journal mode; in WAL mode, or when that
descriptor cannot be told apart, from ``sqlite3_serialize``, which reads through SQLite's pager
and so sees the writes still in the log. The next snapshot takes the pages again, walks each
table's b-tree from its root, and for every leaf page:

- a page that was a leaf of the same table and holds the same bytes holds the same rows: they
  are taken from the earlier state;
- a page laid out alike (same header and cell pointers) whose cells differ in a few places has
  its other cells taken from the earlier state, and only the rows of the differing cells read;
- any other leaf page has its rows read with an ordinary ``SELECT`` over its rowid range.

Every value that is read is decoded by SQLite itself, exactly as a full read decodes it; row
digests and the table digest are computed as `oracle.sinks.sql_state.build_table` computes
them, so the state, its digests and its JSON are those of a full read. Beside the state the
reader keeps each table's rows cut into chunks, one per leaf page, with a digest over its rows:
`PageReader.chunked` hands them to `diff`, which then looks only at chunks that differ
(`oracle.sinks.sql_diff`). The evidence itself holds only what a full read holds.

Where this cannot be sure it reads everything, as a full snapshot does, and says why in
`PageReader.fallback` (the whole database) or `PageReader.table_fallbacks` (one table): no
earlier snapshot of this sink, the schema changed (a table added, dropped, altered or moved to
another root page), the file header changed (page size, reserved bytes, file format, schema
format, text encoding, schema cookie: a ``VACUUM`` moves it), auto-vacuum, a database larger
than `MAX_IMAGE_BYTES`, a page that is not what a table b-tree holds. A table whose key is not
its rowid (another key, none) is reused whole when none of its pages changed and read whole
otherwise; a ``WITHOUT ROWID`` table (an index b-tree) and a virtual table are always read
whole. A leaf page that holds a row spilling to overflow pages is always read again: its rows
can change on pages this walk does not compare. Pages that left a table (the freelist) need no
check: rows are taken only from the pages the table's b-tree reaches now.
"""

from __future__ import annotations

import hashlib
import struct
import weakref
from collections import OrderedDict
from collections.abc import (
    Callable,
    ItemsView,
    Iterator,
    KeysView,
    Mapping,
    Sequence,
    ValuesView,
)
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from oracle.base.canonical import digest_json, row_digest
from oracle.sinks.sql_state import Chunk, ChunkedView, Chunking, SqlState, TableState
from oracle.sinks.sqlite_btree import (
    FIELD_NAMES,
    Header,
    NotUnderstood,
    Tree,
    file_image,
    read_header,
    signed,
    varint,
)

#: Databases larger than this are read whole: keeping their pages would cost too much memory.
MAX_IMAGE_BYTES = 1 << 30
#: How many snapshots' pages a sink keeps (the ones used as a base most recently).
KEEP_IMAGES = 4
#: Rowids fetched per ``IN (...)`` query.
BATCH = 500

#: Chunks are the leaf pages of a table, named by their first rowid. It is not archived: a
#: table state read page by page writes the same JSON as one read whole.
PAGE_CHUNKS = Chunking(mode="sqlite-page")


@dataclass(frozen=True)
class Leaf:
    """One leaf page of a table: its first and last rowid, its cell count, whether a cell
    spills to overflow pages, and the digests of its rows joined (for the table digest)."""

    first: int
    last: int
    cells: int
    overflow: bool
    blob: bytes


@dataclass(frozen=True)
class TablePages:
    """Where a table's rows were: ``leaves`` for a table keyed by rowid (page -> `Leaf`);
    ``pages`` (every page of its b-tree) for a table reused only whole."""

    root: int
    leaves: Mapping[int, Leaf] | None
    pages: frozenset[int]
    overflow: bool
    #: The table's rows by leaf page (first rowid -> `Chunk`), for `PageReader.chunked`.
    chunks: Mapping[int, Chunk] | None = None


@dataclass(frozen=True)
class PageImage:
    """A snapshot's pages and what they held."""

    data: bytes
    header: tuple[int, ...]
    schema: tuple[tuple[Any, ...], ...]
    tables: Mapping[str, TablePages]


def _chunk_digest(blob: bytes) -> tuple[int, int]:
    d = hashlib.blake2b(blob, digest_size=16).digest()
    return int.from_bytes(d[:8]), int.from_bytes(d[8:])


def _table_digest(t: TableState, blobs: Iterator[bytes]) -> str:
    """`build_table`'s digest of a keyed table, from its row digests in key order."""
    h = hashlib.blake2b(digest_size=32)
    h.update(
        digest_json({"columns": [c.model_dump() for c in t.columns], "pk": t.primary_key}).encode()
    )
    for blob in blobs:
        h.update(blob)
    return "blake2b:" + h.hexdigest()


def _chunk(
    keys: Sequence[tuple[Any, ...]], rows: Sequence[tuple[Any, ...]], digests: Sequence[bytes]
) -> tuple[Chunk, bytes]:
    blob = b"".join(digests)
    return (
        Chunk(
            _chunk_digest(blob),
            MappingProxyType(dict(zip(keys, rows, strict=True))),
            MappingProxyType(dict(zip(keys, digests, strict=True))),
        ),
        blob,
    )


class _Slice(Mapping[tuple[Any, ...], Any]):
    """The rows (or row digests) of one leaf page of a table read whole: positions
    ``start:end`` of its keys, looked up in the whole table's mapping. Made into a dict of
    its own the first time it is read: most pages never are."""

    __slots__ = ("_dict", "_end", "_keys", "_start", "_whole")

    def __init__(
        self,
        keys: tuple[tuple[Any, ...], ...],
        start: int,
        end: int,
        whole: Mapping[tuple[Any, ...], Any],
    ) -> None:
        self._keys, self._start, self._end, self._whole = keys, start, end, whole
        self._dict: dict[tuple[Any, ...], Any] | None = None

    def _own(self) -> dict[tuple[Any, ...], Any]:
        if self._dict is None:
            keys = self._keys[self._start : self._end]
            self._dict = dict(zip(keys, map(self._whole.__getitem__, keys), strict=True))
        return self._dict

    def __getitem__(self, key: tuple[Any, ...]) -> Any:
        own = self._dict
        return (own if own is not None else self._own())[key]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._keys[self._start : self._end])

    def __len__(self) -> int:
        return self._end - self._start

    def keys(self) -> KeysView[tuple[Any, ...]]:
        return self._own().keys()

    def items(self) -> ItemsView[tuple[Any, ...], Any]:
        return self._own().items()

    def values(self) -> ValuesView[Any]:
        return self._own().values()


def _paged(t: TableState, chunks: Mapping[int, Chunk]) -> TableState:
    """`t` with its rows and digests seen through its chunks, in key order. The chunks stay
    out of the state (see `PageReader.chunked`), and each view is wrapped read-only, as a
    full read's mappings are, so that a copy of the evidence shares the rows."""
    return replace(
        t,
        rows=MappingProxyType(ChunkedView(chunks, PAGE_CHUNKS, "rows")),
        digests=MappingProxyType(ChunkedView(chunks, PAGE_CHUNKS, "digests")),
    )


@dataclass
class _Info:
    """What the schema says of one table."""

    root: int
    rowid_key: bool  # its single primary-key column is the rowid
    virtual: bool


class PageReader:
    """Reads a SQLite database page by page against an earlier snapshot (module docstring).

    `read` is called inside the snapshot's read transaction with the DB-API connection and
    the sink's callables for what a full read does: `names` (the tables the sink observes),
    `read_table` (one table, whole) and `read_objects` (indexes, views, triggers)."""

    def __init__(self, sink: str) -> None:
        self.sink = sink
        self._images: OrderedDict[int, tuple[weakref.ref[SqlState], PageImage]] = OrderedDict()
        #: Why the last snapshot read the whole database (None: it read only what changed).
        self.fallback: str | None = None
        #: Tables the last snapshot read whole, and why.
        self.table_fallbacks: dict[str, str] = {}
        #: Counts from the last snapshot.
        self.stats: dict[str, int] = {}

    def _image_of(self, state: SqlState | None) -> PageImage | None:
        if state is None:
            return None
        held = self._images.get(id(state))
        if held is None or held[0]() is not state:
            return None
        self._images.move_to_end(id(state))
        return held[1]

    def chunked(self, state: SqlState) -> SqlState:
        """`state` with its tables cut into chunks by leaf page when this reader read it, so
        that `diff` compares only the chunks that differ; else `state` itself. The chunks are
        kept beside the state, never in it: the evidence holds what a full read holds."""
        image = self._image_of(state)
        if image is None:
            return state
        tables = dict(state.tables)
        for name, pages in image.tables.items():
            t = tables.get(name)
            if t is not None and pages.chunks is not None and t.keyed:
                tables[name] = replace(t, chunks=pages.chunks)
        return SqlState(MappingProxyType(tables), state.objects)

    def remember(self, state: SqlState, image: PageImage | None) -> None:
        """Keep `image` as the pages of `state`, for a later snapshot whose base it is."""
        if image is None:
            return
        key = id(state)
        self._images[key] = (weakref.ref(state, lambda _r: self._images.pop(key, None)), image)
        while len(self._images) > KEEP_IMAGES:
            self._images.popitem(last=False)

    def read(
        self,
        dbapi: Any,
        base: SqlState | None,
        names: Callable[[], list[str]],
        read_table: Callable[[str], TableState],
        read_objects: Callable[[list[str]], dict[str, Any]],
    ) -> tuple[SqlState, PageImage | None]:
        self.fallback = None
        self.table_fallbacks = {}
        self.stats = dict.fromkeys(
            (
                "pages_reused",
                "pages_read",
                "cells_reused",
                "rows_fetched",
                "tables_reused",
                "image_from_file",
            ),
            0,
        )
        cur = dbapi.cursor()
        try:
            # This first read takes the read transaction's snapshot: the pages below are its.
            schema = tuple(
                tuple(r)
                for r in cur.execute(
                    "SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master ORDER BY rowid"
                ).fetchall()
            )
            data = self._image(dbapi, cur)
            head = None
            if data is not None:
                try:
                    head = read_header(data)
                except NotUnderstood as exc:
                    self.fallback = str(exc)
            old = self._image_of(base)
            if head is not None and self.fallback is None:
                self.fallback = self._why_not(old, head, schema, base)
            chosen = names()
            if self.fallback is None and base is not None and list(base.tables) != chosen:
                self.fallback = "the tables observed changed"
            info = _schema_info(cur, schema, chosen)
            tree = Tree(data, head) if data is not None and head is not None else None
            old_tree = None
            if self.fallback is None and old is not None and head is not None:
                old_tree = Tree(old.data, head)
            tables: dict[str, TableState] = {}
            pages: dict[str, TablePages] = {}
            for name in chosen:
                prior = None
                if old_tree is not None and old is not None and base is not None:
                    prior = (base.tables[name], old.tables.get(name), old_tree)
                t, tp = self._table(cur, name, info[name], tree, prior, read_table)
                tables[name] = t
                if tp is not None:
                    pages[name] = tp
            if self.fallback is None and base is not None:
                objects = dict(base.objects)
            else:
                objects = read_objects(chosen)
        finally:
            cur.close()
        state = SqlState(MappingProxyType(tables), MappingProxyType(objects))
        image = None
        if data is not None and head is not None:
            image = PageImage(data, head.fields, schema, MappingProxyType(pages))
        return state, image

    def _image(self, dbapi: Any, cur: Any) -> bytes | None:
        """The database's pages as this read transaction sees them."""
        data = file_image(cur, MAX_IMAGE_BYTES)
        if data is not None:
            self.stats["image_from_file"] = 1
            return data
        serialize = getattr(dbapi, "serialize", None)
        if serialize is None:
            self.fallback = "this SQLite cannot serialize a database"
            return None
        count = cur.execute("PRAGMA page_count").fetchone()[0]
        size = cur.execute("PRAGMA page_size").fetchone()[0]
        if count * size > MAX_IMAGE_BYTES:
            self.fallback = f"the database is larger than {MAX_IMAGE_BYTES} bytes"
            return None
        return bytes(serialize())

    def _why_not(
        self,
        old: PageImage | None,
        head: Header,
        schema: tuple[tuple[Any, ...], ...],
        base: SqlState | None,
    ) -> str | None:
        if head.fields[6]:
            return "auto-vacuum is on (pages move)"
        if base is None or old is None:
            return "no earlier snapshot of this sink to compare pages with"
        if old.schema != schema:
            return "the schema changed"
        for name, was, now in zip(FIELD_NAMES, old.header, head.fields, strict=True):
            if was != now:
                # The schema cookie moves with no change of the schema when VACUUM rewrote
                # the file.
                return f"the {name} changed ({was} -> {now})"
        return None

    def _table(
        self,
        cur: Any,
        name: str,
        info: _Info,
        tree: Tree | None,
        prior: tuple[TableState, TablePages | None, Tree] | None,
        read_table: Callable[[str], TableState],
    ) -> tuple[TableState, TablePages | None]:
        if tree is None:
            return read_table(name), None
        if info.virtual:
            self.table_fallbacks[name] = "a virtual table"
            return read_table(name), None
        try:
            leaves = tree.leaves(info.root)
            seen = frozenset(tree.seen)
            if info.rowid_key:
                if prior is not None and prior[1] is not None and prior[1].leaves is not None:
                    return self._changed_rows(cur, name, tree, leaves, seen, info, prior)
                if prior is not None:
                    self.table_fallbacks[name] = "no earlier page map of this table"
                t = read_table(name)
                try:
                    return self._index(name, t, tree, info.root, leaves, seen)
                except NotUnderstood as exc:
                    self.table_fallbacks[name] = str(exc)
                    return t, None
        except NotUnderstood as exc:
            self.table_fallbacks[name] = str(exc)
            return read_table(name), None
        # Not keyed by rowid: reused only when no page of its b-tree changed.
        if prior is not None:
            old_t, old_p, old_tree = prior
            if (
                old_p is not None
                and old_p.leaves is None
                and not old_p.overflow
                and old_p.root == info.root
                and old_p.pages == seen
                and all(tree.page(p) == old_tree.page(p) for p in seen)
            ):
                self.stats["tables_reused"] += 1
                self.stats["pages_reused"] += len(seen)
                return old_t, old_p
            self.table_fallbacks[name] = "its key is not its rowid, and its pages changed"
        try:
            overflow = any(tree.overflows(p) for p in leaves)
        except NotUnderstood as exc:
            self.table_fallbacks[name] = str(exc)
            return read_table(name), None
        self.stats["pages_read"] += len(seen)
        return read_table(name), TablePages(info.root, None, seen, overflow)

    def _index(
        self,
        name: str,
        t: TableState,
        tree: Tree,
        root: int,
        leaves: list[int],
        seen: frozenset[int],
    ) -> tuple[TableState, TablePages | None]:
        """A table read whole, cut into its leaf pages' chunks."""
        keys = tuple(t.rows.keys())
        digests = list(t.digests.values())
        chunks: dict[int, Chunk] = {}
        out: dict[int, Leaf] = {}
        at = 0
        for p in leaves:
            first, last, n, overflow = tree.leaf(p)
            if n == 0:
                continue
            end = at + n
            if end > len(keys) or keys[at][0] != first or keys[end - 1][0] != last:
                raise NotUnderstood(f"page {p} does not hold the rows read for it")
            blob = b"".join(digests[at:end])
            chunks[first] = Chunk(
                _chunk_digest(blob),
                _Slice(keys, at, end, t.rows),
                _Slice(keys, at, end, t.digests),
            )
            out[p] = Leaf(first, last, n, overflow, blob)
            at = end
        if at != len(keys):
            raise NotUnderstood(f"{len(keys)} rows were read but its pages hold {at}")
        self.stats["pages_read"] += len(seen)
        frozen = MappingProxyType(chunks)
        return t, TablePages(root, MappingProxyType(out), seen, False, frozen)

    def _changed_rows(
        self,
        cur: Any,
        name: str,
        tree: Tree,
        leaves: list[int],
        seen: frozenset[int],
        info: _Info,
        prior: tuple[TableState, TablePages | None, Tree],
    ) -> tuple[TableState, TablePages]:
        old_t, old_p, old_tree = prior
        assert old_p is not None and old_p.leaves is not None
        if old_p.chunks is None or len(old_t.primary_key) != 1 or not old_t.keyed:
            raise NotUnderstood("the earlier state of this table has no pages")
        old_leaves, old_chunks = old_p.leaves, old_p.chunks
        ps, new_data, old_data = tree.head.page_size, tree.data, old_tree.data
        # Per leaf: the `Leaf` to reuse, or a `_Changed` to read.
        plan: list[tuple[int, Leaf | _Changed]] = []
        todo: list[_Changed] = []
        for p in leaves:
            was = old_leaves.get(p)
            at = (p - 1) * ps
            if (
                was is not None
                and not was.overflow
                and new_data[at : at + ps] == old_data[at : at + ps]
            ):
                plan.append((p, was))
                continue
            changed = self._changed_page(tree, old_tree, p, was)
            self.stats["pages_read"] += 1
            if changed is not None:
                plan.append((p, changed))
                todo.append(changed)
        self.stats["pages_reused"] += len(plan) - len(todo)
        pk = old_t.primary_key[0]
        key_at = old_t.column_names.index(pk)
        fetched = self._fetch(cur, name, old_t, pk, todo)
        chunks: dict[int, Chunk] = {}
        out: dict[int, Leaf] = {}
        blobs: list[bytes] = []
        for p, item in plan:
            if isinstance(item, Leaf):
                chunks[item.first] = old_chunks[item.first]
                out[p] = item
                blobs.append(item.blob)
                continue
            keys, rows, digests = item.assemble(p, key_at, fetched, old_chunks)
            chunk, blob = _chunk(keys, rows, digests)
            first = keys[0][0]
            chunks[first] = chunk
            out[p] = Leaf(first, keys[-1][0], len(keys), item.overflow, blob)
            blobs.append(blob)
        t = replace(old_t, digest=_table_digest(old_t, iter(blobs)))
        frozen = MappingProxyType(chunks)
        return _paged(t, frozen), TablePages(info.root, MappingProxyType(out), seen, False, frozen)

    def _changed_page(
        self, tree: Tree, old_tree: Tree, p: int, was: Leaf | None
    ) -> _Changed | None:
        """What to read of a leaf page that is not the same as before (None: it is empty)."""
        page = tree.page(p)
        n = int.from_bytes(page[3:5])
        if n == 0:
            return None
        array_end = 8 + 2 * n
        if was is not None and not was.overflow and was.cells == n:
            old_page = old_tree.page(p)
            if page[:array_end] == old_page[:array_end]:
                return self._changed_cells(tree, p, page, old_page, n, was)
        first, last, cells, overflow = tree.leaf(p)
        return _Changed(first, last, cells, overflow, None, was)

    def _changed_cells(
        self, tree: Tree, p: int, page: bytes, old_page: bytes, n: int, was: Leaf
    ) -> _Changed:
        """A page laid out as before: only the cells whose bytes differ are read again."""
        usable = tree.head.usable
        ptrs: tuple[int, ...] = struct.unpack_from(f">{n}H", page, 8)
        # The span of bytes that differ, from the two pages as big numbers.
        x = int.from_bytes(page) ^ int.from_bytes(old_page)
        lo = len(page) - (x.bit_length() + 7) // 8
        hi = len(page) - 1 - ((x & -x).bit_length() - 1) // 8
        order = sorted(range(n), key=ptrs.__getitem__)
        ends = [ptrs[i] for i in order[1:]] + [usable]
        if len(set(ptrs)) != n or min(ptrs) < 8 + 2 * n or max(ptrs) >= usable:
            raise NotUnderstood(f"page {p}: cell pointers overlap or point outside")
        rowids: dict[int, int] = {}
        overflow = False
        limit = usable - 35
        for i, end in zip(order, ends, strict=True):
            start = ptrs[i]
            if end <= lo or start > hi or page[start:end] == old_page[start:end]:
                continue
            payload, at = varint(page, start)
            rowids[i] = signed(varint(page, at)[0])
            overflow = overflow or payload > limit
        self.stats["cells_reused"] += n - len(rowids)
        return _Changed(0, 0, n, overflow, rowids, was)

    def _fetch(
        self, cur: Any, name: str, t: TableState, pk: str, todo: list[_Changed]
    ) -> dict[int, tuple[Any, ...]]:
        """Rows by rowid: whole pages by range, single cells by value (SQLite decodes them)."""
        q = _quote
        cols = ", ".join(map(q, t.column_names))
        key_at = t.column_names.index(pk)
        out: dict[int, tuple[Any, ...]] = {}

        def take(rows: list[Any]) -> None:
            for r in rows:
                row = tuple(r)
                rowid = row[key_at]
                if type(rowid) is not int:
                    raise NotUnderstood(f"table {name!r}: key {rowid!r} is not a rowid")
                out[rowid] = row

        sql = f"SELECT {cols} FROM {q(name)} WHERE {q(pk)} BETWEEN ? AND ? ORDER BY {q(pk)}"
        singles: list[int] = []
        for item in todo:
            if item.rowids is None:
                item.rows = [tuple(r) for r in cur.execute(sql, (item.first, item.last))]
                self.stats["rows_fetched"] += len(item.rows)
            else:
                singles.extend(item.rowids.values())
        for i in range(0, len(singles), BATCH):
            part = singles[i : i + BATCH]
            marks = ", ".join("?" * len(part))
            take(
                cur.execute(
                    f"SELECT {cols} FROM {q(name)} WHERE {q(pk)} IN ({marks})", part
                ).fetchall()
            )
        self.stats["rows_fetched"] += len(out)
        return out


@dataclass
class _Changed:
    """A leaf page to read again: its rowid range (`rowids` None: read it whole), or the
    rowids of the cells that differ, by cell position (the others are the earlier ones)."""

    first: int
    last: int
    cells: int
    overflow: bool
    rowids: dict[int, int] | None
    was: Leaf | None
    rows: list[tuple[Any, ...]] | None = None  # read by range

    def assemble(
        self,
        p: int,
        key_at: int,
        fetched: Mapping[int, tuple[Any, ...]],
        old_chunks: Mapping[int, Chunk],
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[bytes]]:
        """The page's keys, rows and row digests, in key order."""
        keys: list[tuple[Any, ...]] = []
        rows: list[tuple[Any, ...]] = []
        digests: list[bytes] = []
        if self.rowids is None:
            assert self.rows is not None
            rows = self.rows
            keys = [(r[key_at],) for r in rows]
            if any(type(k[0]) is not int for k in keys):
                raise NotUnderstood(f"page {p}: a key read for it is not a rowid")
            digests = [row_digest(r) for r in rows]
        else:
            assert self.was is not None
            old = old_chunks[self.was.first]
            old_keys = list(old.rows.keys())
            keys, rows, digests = old_keys[:], list(old.rows.values()), list(old.digests.values())
            if len(keys) != self.cells:
                raise NotUnderstood(f"page {p} holds {self.cells} rows, {len(keys)} were before")
            for i, rowid in self.rowids.items():
                new = fetched.get(rowid)
                if new is None:
                    raise NotUnderstood(f"page {p}: row {rowid} was not read")
                keys[i], rows[i], digests[i] = (rowid,), new, row_digest(new)
            if any(keys[i] != old_keys[i] for i in self.rowids):
                ids = [k[0] for k in keys]
                if ids != sorted(set(ids)):
                    raise NotUnderstood(f"page {p}: its rows are not in rowid order")
        if len(keys) != self.cells:
            raise NotUnderstood(f"page {p} holds {self.cells} rows, {len(keys)} were read")
        return keys, rows, digests


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _schema_info(
    cur: Any, schema: tuple[tuple[Any, ...], ...], names: list[str]
) -> dict[str, _Info]:
    """Each table's root page, whether its key is its rowid, whether it is virtual."""
    out: dict[str, _Info] = {}
    rows = {name: (root, sql) for typ, name, _tbl, root, sql in schema if typ == "table"}
    for name in names:
        root, sql = rows.get(name, (0, None))
        virtual = not root or (sql or "").lstrip().upper().startswith("CREATE VIRTUAL")
        rowid_key = False
        if not virtual:
            cols = cur.execute(f"PRAGMA table_info({_quote(name)})").fetchall()
            keyed = [c for c in cols if c[5]]
            pk_index = any(
                ix[3] == "pk" for ix in cur.execute(f"PRAGMA index_list({_quote(name)})").fetchall()
            )
            # SQLite's rule: a rowid table's one key column declared exactly INTEGER is the
            # rowid, unless it made an index of its own (INTEGER PRIMARY KEY DESC, WITHOUT ROWID).
            rowid_key = len(keyed) == 1 and str(keyed[0][2]).upper() == "INTEGER" and not pk_index
        out[name] = _Info(int(root or 0), rowid_key, virtual)
    return out
