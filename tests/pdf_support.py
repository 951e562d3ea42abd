"""A minimal PDF writer for the tests: text pages in Helvetica (WinAnsi), one line per ``Tj``, as a word processor's
"save as PDF" lays out plain text; an optional title property."""

from __future__ import annotations

from pathlib import Path


def _pdf_string(text: str, encoding: str = "cp1252") -> bytes:
    """A PDF string: in a content stream, the font's WinAnsi bytes; elsewhere (the title) UTF-16 after its mark."""
    raw = text.encode("cp1252") if encoding == "cp1252" else b"\xfe\xff" + text.encode("utf-16-be")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def write_pdf(path: Path, pages: list[list[str]], title: str | None = None) -> Path:
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in below, once the page tree's number is known
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    tree = add(b"")
    kids = []
    for lines in pages:
        ops = b"BT /F1 11 Tf 14 TL 72 740 Td " + b" T* ".join(_pdf_string(line) + b" Tj" for line in lines) + b" ET"
        content = add(b"<< /Length %d >>\nstream\n" % len(ops) + ops + b"\nendstream")
        kids.append(add(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 %d 0 R >> >> "
                        b"/Contents %d 0 R >>" % (tree, font, content)))
    objects[tree - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % k for k in kids), len(kids))
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % tree
    info = add(b"<< /Title " + _pdf_string(title, "utf-16") + b" >>") if title else None
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R" % (len(objects) + 1, catalog)
    out += (b" /Info %d 0 R" % info if info else b"") + b" >>\nstartxref\n%d\n%%%%EOF\n" % xref
    Path(path).write_bytes(bytes(out))
    return Path(path)
