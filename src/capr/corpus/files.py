"""Opening source files: gzip transparently, with clear errors for empty, binary and non-UTF-8 input.

A leading UTF-8 byte-order mark (which Windows editors and Excel write) is dropped everywhere here, so
no reader sees it: not in a first JSON line, a CSV header, a text note's "# Title" or a format sniff.
A file that opens with a UTF-16 byte-order mark (Excel's "Unicode text", Notepad's "Unicode") is read
as UTF-16, and its head is handed to the sniffs as UTF-8 like any other file's."""

from __future__ import annotations

import codecs
import csv
import errno
import gzip
import io
import json
import os
import re
import tarfile
import zlib
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Iterator, TypeVar

from capr.errors import BadInputError

if TYPE_CHECKING:
    from capr.corpus.report import ReadReport

T = TypeVar("T")

BOM = codecs.BOM_UTF8
# "utf-8-sig" decodes UTF-8 and drops one leading byte-order mark (a no-op without one)
TEXT_ENCODING = "utf-8-sig"
# "utf-16" takes the byte order from the mark and drops it
UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)

# What reading a (possibly compressed) source can raise part-way through: a damaged or cut gzip
# stream (BadGzipFile is an OSError, a cut stream an EOFError, a damaged deflate block zlib.error),
# bytes that are not UTF-8 past the checked head, malformed CSV, a cut tar archive, an I/O error.
READ_ERRORS = (OSError, EOFError, zlib.error, UnicodeDecodeError, csv.Error, tarfile.TarError)


def read_error_reason(e: BaseException) -> str:
    """One short, user-facing reason for a read failure (no exception class names, no traceback)."""
    msg = str(e)
    if isinstance(e, EOFError):
        return "truncated gzip data (the file ends inside the compressed stream)"
    if isinstance(e, gzip.BadGzipFile):
        if "CRC check failed" in msg:
            return "corrupt gzip data (bad CRC)"
        if "Incorrect length" in msg:
            return "corrupt gzip data (bad length)"
        return f"corrupt gzip data ({msg})"
    if isinstance(e, zlib.error):
        return f"corrupt gzip data ({msg.removeprefix('Error -3 while decompressing data: ')})"
    if isinstance(e, UnicodeDecodeError):
        return f"not {'UTF-16' if e.encoding.startswith('utf-16') else 'UTF-8'} text ({e.reason})"
    if isinstance(e, csv.Error):
        return f"malformed CSV ({msg})"
    if isinstance(e, tarfile.TarError):
        return f"damaged tar archive ({msg})"
    if isinstance(e, OSError):
        return f"cannot read file: {e.strerror or msg}"
    return msg


def guard_reads(path: Path, items: Iterable[T], where: Callable[[], str | None]) -> Iterator[T]:
    """Yields ``items``; a read failure part-way through becomes one BadInputError naming the file,
    the record being read (``where()``) and the reason. Such an error is fatal even with --skip-bad:
    the stream cannot be resumed after it, and indexing the records before it alone would silently
    drop the rest, so the write is aborted and the previous generation stays current."""
    it = iter(items)
    box: list[T] = []  # yielded with pop(): the suspended generator keeps no reference to a (huge) item
    while True:
        try:
            box.append(next(it))
        except StopIteration:
            return
        except READ_ERRORS as e:
            raise BadInputError(str(path), read_error_reason(e), where()) from None
        yield box.pop()


def numbered_lines(path: Path, fh: Iterable[str]) -> Iterator[tuple[int, str]]:
    """(line number, line) of an open text file; a damaged gzip stream or non-UTF-8 bytes past the checked head are
    one BadInputError naming the file and the line (:func:`guard_reads`)."""
    lineno = 0
    for line in guard_reads(path, fh, lambda: f"line {lineno + 1}"):
        lineno += 1
        yield lineno, line


def csv_header(path: Path, reader: "csv.DictReader") -> list[str]:
    """The column names of a DictReader (reading them can already hit a damaged gzip stream)."""
    try:
        return list(reader.fieldnames or [])
    except READ_ERRORS as e:
        raise BadInputError(str(path), read_error_reason(e), "line 1") from None


# Office keeps "~$notes.csv" (a few bytes naming who has it open) beside a file it has open, Excel a CSV too:
# never part of a corpus, whatever its suffix
OWNER_FILE_PREFIX = "~$"


def folder_files(root: Path) -> list[tuple[Path, str | None]]:
    """Every file under a folder, in path order, with None or why it cannot be read: symbolic links are
    followed (a linked folder of notes is part of the corpus), a broken link, a link back into a folder
    that contains it (a loop) and a second path to a file or folder already listed (by its real path) are
    reported rather than read. The first path of a file or folder is the one that reaches it without a link.
    Office owner files (``~$name``) are left out."""
    root = Path(root)
    # what the folder holds without following a link: a link to one of these is a second path to it
    owner: dict[str, Path] = {os.path.realpath(root): root}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            if not p.is_symlink():
                owner.setdefault(os.path.realpath(p), p)
    out: list[tuple[Path, str | None]] = []

    def walk(folder: Path, ancestors: frozenset[str]) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as e:
            out.append((folder, f"cannot read folder: {e.strerror or e}"))
            return
        for entry in entries:
            path = Path(entry.path)
            real = os.path.realpath(path)
            first = owner.setdefault(real, path)
            if entry.is_symlink():
                target = os.readlink(path)
                if not os.path.exists(real):
                    out.append((path, _dangling_link_reason(path, target)))
                    continue
                if any(a == real or a.startswith(real + os.sep) for a in ancestors):
                    out.append((path, f"symbolic link loop (its target {target} is a folder that contains it)"))
                    continue
                if first != path:
                    what = "folder" if os.path.isdir(real) else "file"
                    out.append((path, f"symbolic link to a {what} read already as {first}"))
                    continue
            if os.path.isdir(real):
                walk(path, ancestors | {real})
            elif os.path.isfile(real) and not entry.name.startswith(OWNER_FILE_PREFIX):
                out.append((path, None))

    walk(root, frozenset({os.path.realpath(root)}))
    return out


def missing_reason(path: Path) -> str:
    """Why a path given as a source reads as nothing: a symbolic link that loops or whose target is gone, or no
    such file at all."""
    return _dangling_link_reason(path, os.readlink(path)) if os.path.islink(path) else "no such file or directory"


def _dangling_link_reason(path: Path, target: str) -> str:
    """Why a symbolic link leads to no file: a loop (a link to itself, or links that lead back to one another) or a
    missing target."""
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"symbolic link loop (its target {target} leads back to it)"
    return f"broken symbolic link (its target {target} does not exist)"


def is_hidden(path: Path, root: Path) -> bool:
    """Under a hidden name (.DS_Store, .git/...): system or tool litter, not part of a corpus."""
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def wanted_files(root: Path, report: "ReadReport", wanted: Callable[[Path], bool]) -> list[Path]:
    """The files under a folder that ``wanted`` takes (see :func:`folder_files`); a broken or looping
    link goes to ``report.bad`` (an error unless skipping), as an unreadable file does."""
    out = []
    for path, why in folder_files(root):
        if why is not None:
            if not is_hidden(path, root):
                report.bad(str(path), why)
        elif wanted(path):
            out.append(path)
    return out


def read_each_file(source: Path, report: "ReadReport", wanted: Callable[[Path], bool],
                   read_one: Callable[[Path, Path, "ReadReport"], T | None], what: str) -> Iterator[T]:
    """One file read by ``read_one(path, root, report)``, or each ``wanted`` file of a folder (its root the
    folder, so that a document's id is its path under it); a folder without one is refused, naming ``what`` it
    lacks. A file ``read_one`` reports as bad (returning None) is passed over."""
    source = Path(source)
    if source.is_file():
        files, root = [source], source.parent
    else:
        files, root = wanted_files(source, report, wanted), source
        if not files:
            raise BadInputError(str(source), f"no {what} found")
    for path in files:
        if (doc := read_one(path, root, report)) is not None:
            yield doc


def is_gzip_name(path: Path) -> bool:
    """Whether ``path`` is named as gzip'd (``.gz``, in any case: Windows tools write ``NOTES.TXT.GZ``)."""
    return path.suffix.lower() == ".gz"


def _open_bytes(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if is_gzip_name(path) else open(path, "rb")


# the fields of every record `capr labels` writes (capr.labels.generate.LabeledPassage): no corpus' documents have them all
LABELS_FIELDS = frozenset({"pid", "doc_id", "aspect", "entities", "sentences", "text"})


def is_labels_file(path: Path) -> bool:
    """Whether ``path`` is a file of labelled passages written by `capr labels` (its first record has their fields):
    written into the corpus folder, it was read back as documents, each passage a document of its own."""
    if not path.name.lower().endswith((".jsonl", ".jsonl.gz", ".json", ".ndjson", ".ndjson.gz")):
        return False
    try:
        with _open_bytes(path) as fh:
            record = json.loads(fh.readline(1 << 20).removeprefix(BOM))
    except (OSError, EOFError, zlib.error, ValueError, RecursionError):
        return False
    return isinstance(record, dict) and LABELS_FIELDS <= record.keys()


def read_head(path: Path, n: int = 8192) -> bytes:
    """The first ``n`` bytes (decompressed) as UTF-8, without a leading byte-order mark: the sniffs that look
    at them (a JSON "{", a CSV header, an XML root) must not depend on whether an editor wrote one, nor on
    whether it saved UTF-16 (whose bytes are then decoded as far as they go, an undecodable one replaced: the
    reading proper reports it)."""
    try:
        with _open_bytes(path) as fh:
            head = fh.read(n)
    except (OSError, EOFError, zlib.error) as e:
        raise BadInputError(str(path), read_error_reason(e)) from None
    if head.startswith(UTF16_BOMS):
        if stray_utf16_mark(head):
            return head[2:]
        return codecs.getincrementaldecoder("utf-16")("replace").decode(head).encode()
    return head.removeprefix(BOM)


def stray_utf16_mark(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) opens with a UTF-16 byte-order mark that its text is not: UTF-8 text
    behind a mark some tool prepended, which read as UTF-16 is garbage ("䥈呓剏..."). Real UTF-16 text has NUL
    bytes (Latin letters) or whitespace (a line end, a space) when read so; such a reading has neither."""
    if not head.startswith(UTF16_BOMS) or b"\x00" in head[2:]:
        return False
    rest = head[2:]
    try:
        rest.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(rest) - 4:  # not only a character cut by the head's end
            return False
    as_utf16 = rest[: len(rest) // 2 * 2].decode("utf-16-le" if head.startswith(codecs.BOM_UTF16_LE) else "utf-16-be",
                                                 "replace")
    return not any(c.isspace() for c in as_utf16)


def first_line(head: bytes) -> bytes:
    """The first line of a file's head, ended by \n, \r\n or the \r alone of old Mac exports (Excel for Mac's
    "CSV (Macintosh)"), as the readers' line splitting ends it."""
    return _FIRST_LINE_RE.match(head).group()


_FIRST_LINE_RE = re.compile(rb"[^\r\n]*")


def _decoding(path: Path) -> tuple[str, int]:
    """How the file's text is decoded, and how many bytes before it are skipped: UTF-16 after a UTF-16 byte-order
    mark, else UTF-8 (a BOM dropped; a stray UTF-16 mark before UTF-8 text skipped: :func:`stray_utf16_mark`)."""
    try:
        with _open_bytes(path) as fh:
            head = fh.read(8192)
    except (OSError, EOFError, zlib.error) as e:
        raise BadInputError(str(path), read_error_reason(e)) from None
    if not head.startswith(UTF16_BOMS):
        return TEXT_ENCODING, 0
    return (TEXT_ENCODING, 2) if stray_utf16_mark(head) else ("utf-16", 0)


def text_encoding(path: Path) -> str:
    """How the file's text is decoded (see :func:`_decoding`)."""
    return _decoding(path)[0]


_XML_DECL_RE = re.compile(rb"""^\s*<\?xml[^>]*?\sencoding\s*=\s*["']([A-Za-z][A-Za-z0-9._-]*)["']""")


def xml_declared_encoding(head: bytes) -> str | None:
    """The encoding an XML declaration names (``<?xml version="1.0" encoding="ISO-8859-1"?>``), or None."""
    m = _XML_DECL_RE.match(head)
    return m.group(1).decode("ascii") if m else None


# what may come before an XML document's root element: the declaration, processing instructions,
# comments and a DOCTYPE (with an internal subset)
_XML_ROOT_RE = re.compile(rb"\s*(?:<\?.*?\?>\s*|<!--.*?-->\s*|<!DOCTYPE[^>\[]*(?:\[.*?\])?\s*>\s*)*<([A-Za-z_][\w.:-]*)", re.S)


def xml_root_name(head: bytes) -> str | None:
    """The local name of the root element an XML file's first bytes open (``ClinicalDocument`` for
    ``<cda:ClinicalDocument``), or None when they do not open one."""
    m = _XML_ROOT_RE.match(head)
    return m.group(1).decode("ascii", "replace").rsplit(":", 1)[-1] if m else None


# compressed data no reader opens, by its first bytes: said as such, not as a "binary file"
_COMPRESSED_MAGIC = ((b"BZh", "bzip2-compressed data"), (b"\xfd7zXZ\x00", "xz-compressed data"),
                     (b"(\xb5/\xfd", "zstd-compressed data"), (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
                     (b"Rar!\x1a\x07", "a RAR archive"), (b"PK\x03\x04", "a zip archive (or an Office document)"))


def compressed_data(path: Path) -> str | None:
    """Why a file of compressed data is not read as text (None: it is not one, or is gzip under a .gz name)."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
    except OSError:
        return None  # the reading proper says why it cannot be read
    for start, what in _COMPRESSED_MAGIC:
        if magic.startswith(start):
            return f"{what}, not text: decompress it (gzip-compressed files are read, under a name ending in .gz)"
    if magic.startswith(b"\x1f\x8b") and not is_gzip_name(path):
        return "gzip-compressed data under a name that does not end in .gz: add .gz to its name to have it read"
    return None


def _utf16_pattern(head: bytes) -> bool:
    """Whether NUL bytes fill every other byte of ``head`` and hardly any of the rest: mostly-Latin text saved as
    UTF-16 without a byte-order mark (which some exporters write), not the scattered NULs of binary data."""
    if len(head) < 4:
        return False
    for nuls, rest in ((head[0::2], head[1::2]), (head[1::2], head[0::2])):
        if nuls.count(0) >= 0.5 * len(nuls) and rest.count(0) <= 0.05 * len(rest):
            return True
    return False


def check_text_file(path: Path, encoding: str = "utf-8") -> None:
    """Refuses a missing, empty, binary or wrongly encoded file with one clear reason. ``encoding``: what
    the file must decode as (an XML file's declared encoding; UTF-8 otherwise)."""
    if not path.exists():
        raise BadInputError(str(path), "no such file or directory")
    if path.stat().st_size == 0:
        raise BadInputError(str(path), "file is empty")
    if (why := compressed_data(path)) is not None:
        raise BadInputError(str(path), why)
    head = read_head(path)
    if b"\x00" in head:
        hint = " (UTF-16 without a byte-order mark? save it as UTF-8)" if _utf16_pattern(head) else ""
        raise BadInputError(str(path), f"binary file (contains NUL bytes), expected text{hint}")
    if text_encoding(path) == "utf-16":
        encoding = "utf-8"  # the byte-order mark overrides a declaration; the head is UTF-8 now (see read_head)
    try:
        head.decode(encoding)
    except LookupError:
        raise BadInputError(str(path), f"unknown text encoding {encoding!r}") from None
    except UnicodeDecodeError as e:
        # the 8 KiB cut may split a multi-byte character: only complain about errors before the end, or about
        # a byte that no continuation makes valid (a short file's last word in Latin-1)
        if e.start < len(head) - 4 or (codecs.lookup(e.encoding).name == "utf-8" and e.reason != "unexpected end of data"):
            what = "UTF-8" if codecs.lookup(encoding).name == "utf-8" else f"{encoding} (as declared)"
            raise BadInputError(str(path), f"not {what} text (invalid byte at offset {e.start})") from None
    if not is_gzip_name(path) and not head.strip():
        raise BadInputError(str(path), "file contains only whitespace")


def open_text(path: Path) -> IO[str]:
    check_text_file(path)
    encoding, skip = _decoding(path)
    if is_gzip_name(path) or skip:
        fh = _open_bytes(path)
        fh.read(skip)
        return io.TextIOWrapper(fh, encoding=encoding, newline="")
    return open(path, encoding=encoding, newline="")


def read_text(path: Path) -> str:
    check_text_file(path)
    encoding, skip = _decoding(path)
    try:
        with _open_bytes(path) as fh:
            data = fh.read()[skip:]
    except READ_ERRORS as e:
        raise BadInputError(str(path), read_error_reason(e)) from None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        what = "UTF-16" if encoding == "utf-16" else "UTF-8"
        raise BadInputError(str(path), f"not {what} text (invalid byte at offset {e.start})") from None


def parse_json(text: str | bytes, one_line: bool = False) -> Any:
    """``json.loads``, whose failures are a ValueError with one user-facing reason: also JSON nested
    deeper than the parser's recursion limit (a line of 100,000 "["), which json raises as a RecursionError.
    ``one_line``: the text is one line of a file, named by the caller, so the reason gives only the column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        where = f"column {e.colno}" if one_line else f"line {e.lineno}, column {e.colno}"
        raise ValueError(f"invalid JSON: {e.msg} ({where})") from None
    except RecursionError:
        raise ValueError("invalid JSON: nested too deeply (arrays or objects inside each other hundreds of levels "
                         "deep)") from None


# the one key under which exports wrap their array of records ({"data": [...]}, {"documents": [...]})
ARRAY_WRAPPERS = ("data", "documents", "docs", "records", "items", "rows", "results", "entries", "notes", "articles",
                  "passages", "corpus", "questions", "queries")
_WRAPPED_ARRAY_RE = re.compile(rb'\{\s*"(%s)"\s*:\s*\[' % "|".join(ARRAY_WRAPPERS).encode())


def holds_json_array(path: Path) -> bool:
    """Whether the file is one JSON array of records (documents exported as one array), bare or as the value of an
    object's first key of ``ARRAY_WRAPPERS`` (``{"data": [...]}``, as many APIs and exports wrap it)."""
    head = read_head(path, 4096).lstrip()
    return head[:1] == b"[" or _WRAPPED_ARRAY_RE.match(head) is not None


def json_array(path: Path, report: "ReadReport | None" = None) -> Iterator[tuple[str, Any]]:
    """("record N", parsed object) for every element of a file holding one JSON array (bare, or wrapped as
    :func:`holds_json_array` says). The file is parsed whole
    (an array has no line to resume from), so invalid JSON fails the file: through ``report.bad`` (which raises
    unless skipping) or, without a report, at once."""
    with open_text(path) as fh:
        text = "".join(guard_reads(path, fh, lambda: None))
    try:
        records = parse_json(text)
    except ValueError as e:
        if report is None:
            raise BadInputError(str(path), str(e)) from None
        report.bad(str(path), str(e))
        return
    del text
    if isinstance(records, dict):
        wrapped = [key for key in ARRAY_WRAPPERS if isinstance(records.get(key), list)]
        records = records[wrapped[0]] if len(wrapped) == 1 else records
    if not isinstance(records, list):
        reason = f"expected a JSON array of documents, got {type(records).__name__}"
        if isinstance(records, dict):
            reason += (" (an object holds the array under one of the keys "
                       f"{', '.join(ARRAY_WRAPPERS)}; this one has {', '.join(map(str, list(records)[:8]))})")
        if report is None:
            raise BadInputError(str(path), reason)
        report.bad(str(path), reason)
        return
    for n in range(len(records)):
        yield f"record {n + 1}", records[n]
        records[n] = None  # an indexed record is not kept alive by the array


def json_records(path: Path, report: "ReadReport | None" = None) -> Iterator[tuple[str, Any]]:
    """The JSON records of a file: one array's elements for a ``.json`` name whose content is an array (bare or
    wrapped, :func:`holds_json_array`), else one per
    line (a ``.jsonl`` is lines by name, even when its first line is an array: a bad record, said at its line)."""
    if path.name.lower().endswith((".json", ".json.gz")) and holds_json_array(path):
        return json_array(path, report)
    return json_lines(path, report)


def json_lines(path: Path, report: "ReadReport | None" = None) -> Iterator[tuple[str, Any]]:
    """("line N", parsed object) for every non-blank line. Invalid JSON goes to ``report.bad``
    (which raises unless skipping) or, without a report, raises at once."""
    with open_text(path) as fh:
        lineno = 0
        # no enumerate(): its reused result tuple would keep the previous line alive while a record is indexed
        for line in guard_reads(path, fh, lambda: f"line {lineno + 1}"):
            lineno += 1
            if not line or line.isspace():  # not .strip(): a huge line is not copied
                continue
            try:
                obj = parse_json(line, one_line=True)
            except ValueError as e:
                reason = str(e)
                if report is None:
                    raise BadInputError(str(path), reason, f"line {lineno}") from None
                report.bad(str(path), reason, f"line {lineno}")
                continue
            del line  # the parsed record holds what is needed; the raw line is freed before it is indexed
            yield f"line {lineno}", obj


def source_fingerprint(source: Path) -> dict[str, Any]:
    """What identifies a source as the same one again (a resumed `capr index` must read what it read before): its
    real path, and its size and modification time (of a folder: its files' count, total size and newest time)."""
    source = Path(source)
    if source.is_dir():
        files = [p for p, why in folder_files(source) if why is None]
        stats = [p.stat() for p in files]
        return {"path": os.path.realpath(source), "files": len(files), "bytes": sum(s.st_size for s in stats),
                "mtime_ns": max((s.st_mtime_ns for s in stats), default=0)}
    st = source.stat()
    return {"path": os.path.realpath(source), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


class SourcePosition:
    """How far a read of one source file has got, as a fraction of its bytes: the position of the file descriptor
    reading it, from /proc (Linux). None where that cannot be known (a folder, another system, not open yet)."""

    def __init__(self, source: Path) -> None:
        self.path = os.path.realpath(source)
        self.size = os.path.getsize(self.path) if os.path.isfile(self.path) else 0
        self._fd: str | None = None

    def _find_fd(self) -> str | None:
        try:
            for fd in os.listdir("/proc/self/fd"):
                try:
                    if os.readlink(f"/proc/self/fd/{fd}") == self.path:
                        return fd
                except OSError:
                    continue
        except OSError:
            pass
        return None

    def fraction(self) -> float | None:
        if not self.size:
            return None
        for _ in range(2):  # the descriptor found before may be closed (and its number reused) by now
            self._fd = self._fd or self._find_fd()
            if self._fd is None:
                return None
            try:
                with open(f"/proc/self/fdinfo/{self._fd}") as fh:
                    pos = int(fh.readline().split()[1])
                if os.readlink(f"/proc/self/fd/{self._fd}") == self.path:
                    return min(1.0, pos / self.size)
            except (OSError, ValueError, IndexError):
                pass
            self._fd = None
        return None
