"""Text that crosses the wire: one constrained str type for every string field of every contract.

NUL is refused everywhere: no database stores it in text (Postgres refuses it outright, and a
NUL inside a stored JSON document breaks every `::jsonb` read of its table), so a request that
carries one gets a 422 naming the field instead of failing later, far from its cause. The check
is a pattern, so pydantic-core runs it in Rust with no Python call per value.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

NUL_FREE = r"^[^\x00]*$"
# Every string field of the wire models is this type (or narrows it further: lengths, a pattern
# of its own that excludes NUL too). tests/contracts/test_text.py walks the models to keep it so.
NulFree = Annotated[str, Field(pattern=NUL_FREE)]
