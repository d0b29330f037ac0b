"""Kafka's tools' tables (ToolsUtils.prettyPrintTable): each cell padded to its column's width and followed by
a tab; and the fixed-width tables of kafka-consumer-groups (a space between columns)."""

from __future__ import annotations


def tab_table(headers: tuple[str, ...], rows: list[tuple]) -> str:
    cells = [headers, *[tuple(map(str, row)) for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("".join(cell.ljust(width) + "\t" for cell, width in zip(row, widths, strict=False)) for row in cells)


def spaced_table(headers: tuple[str, ...], rows: list[tuple]) -> str:
    cells = [headers, *[tuple(map(str, row)) for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(" ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip() for row in cells)
