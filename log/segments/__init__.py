"""Arrow segment storage for JetStream streams: file and memory stores, read-only inspection."""

from ingest.parser.subjects import subject_matches
from log.segments.api import (
    CorruptSegmentError,
    MsgStore,
    NewMsg,
    StoredMsg,
    StoreError,
    StoreState,
    SubjectState,
    msg_size,
)
from log.segments.filestore import FileStore, SegmentConfig
from log.segments.inspect import SegmentInfo, list_segments, read_segment, read_table
from log.segments.memstore import MemoryStore
from log.segments.schema import SCHEMA

__all__ = [
    "SCHEMA",
    "CorruptSegmentError",
    "FileStore",
    "MemoryStore",
    "MsgStore",
    "NewMsg",
    "SegmentConfig",
    "SegmentInfo",
    "StoreError",
    "StoreState",
    "StoredMsg",
    "SubjectState",
    "list_segments",
    "msg_size",
    "read_segment",
    "read_table",
    "subject_matches",
]
