"""Cells of the CSV files the app writes and reads, safe to open in a spreadsheet.

A spreadsheet runs a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return
as a formula, so text a user or a model wrote is written with a leading apostrophe there (which
spreadsheets show as text and hide). Reading a file back takes that apostrophe off again, so an
exported dataset imports as it was."""

from __future__ import annotations

from typing import Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def cell_out(value: Any) -> str:
    """``value`` as the text of a cell no spreadsheet runs."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_START) else text


def cell_in(text: str) -> str:
    """A cell read from a file: the apostrophe ``cell_out`` added is taken off."""
    return text[1:] if text.startswith("'") and text[1:].startswith(FORMULA_START) else text
