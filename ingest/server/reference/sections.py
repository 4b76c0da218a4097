"""Every config-file section's rows, in the order the page shows them."""

from __future__ import annotations

from ingest.server.reference.entries import Key
from ingest.server.reference.network_sections import NETWORK_SECTIONS
from ingest.server.reference.server_sections import SERVER_SECTIONS

SECTIONS: dict[str, tuple[Key, ...]] = {**SERVER_SECTIONS, **NETWORK_SECTIONS}
