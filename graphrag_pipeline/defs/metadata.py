"""Helpers for materialization metadata: Markdown previews and counts."""

import dagster as dg


def md_table(rows: list[dict], columns: list[str], limit: int = 20, width: int = 80) -> dg.MarkdownMetadataValue:
    def cell(v) -> str:
        s = " ".join(str(v if v is not None else "").split()).replace("|", "\\|")
        return s if len(s) <= width else s[: width - 1] + "\u2026"

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows[:limit]:
        lines.append("| " + " | ".join(cell(row.get(c)) for c in columns) + " |")
    if len(rows) > limit:
        lines.append(f"\n_{len(rows) - limit} more rows not shown_")
    if not rows:
        lines.append("| " + " | ".join("" for _ in columns) + " |")
    return dg.MetadataValue.md("\n".join(lines))
