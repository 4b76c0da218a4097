"""JetStream API errors as values, with the reference server's codes.

Clients branch on `err_code` (nats.go and nats-py map them to exception types),
so each one here must carry the number and wording nats-server uses for the
same condition; `code` is the HTTP-like status the reference puts beside it.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error a JetStream API request or a publish answers with."""

    def __init__(self, code: int, err_code: int, description: str) -> None:
        super().__init__(description)
        self.code = code
        self.err_code = err_code
        self.description = description

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "err_code": self.err_code, "description": self.description}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ApiError) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash((self.code, self.err_code, self.description))

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.err_code}, {self.description!r})"


def required_api_level() -> ApiError:
    return ApiError(412, 10185, "JetStream minimum api level required")


def bad_request() -> ApiError:
    return ApiError(400, 10003, "bad request")


def invalid_json(detail: str) -> ApiError:
    return ApiError(400, 10025, f"invalid JSON: {detail}")


def not_empty_request() -> ApiError:
    return ApiError(400, 10038, "expected an empty request payload")


def no_message_found() -> ApiError:
    return ApiError(404, 10037, "no message found")


def stream_not_found() -> ApiError:
    return ApiError(404, 10059, "stream not found")


def consumer_not_found() -> ApiError:
    return ApiError(404, 10014, "consumer not found")


def stream_name_mismatch() -> ApiError:
    return ApiError(400, 10056, "stream name in subject does not match request")


def stream_name_exists() -> ApiError:
    return ApiError(400, 10058, "stream name already in use with a different configuration")


def subjects_overlap() -> ApiError:
    return ApiError(400, 10065, "subjects overlap with an existing stream")


def invalid_config(detail: str) -> ApiError:
    return ApiError(500, 10052, detail)


def replicas_not_supported() -> ApiError:
    return ApiError(500, 10074, "replicas > 1 not supported in non-clustered mode")


def max_replicas() -> ApiError:
    return ApiError(500, 10052, "maximum replicas is 5")


def no_suitable_peers(tags: list[str] | None = None) -> ApiError:
    unmatched = f", tags not matched {tags!r}" if tags else ""
    return ApiError(400, 10005, f"no suitable peers for placement{unmatched}")


def insufficient_storage() -> ApiError:
    return ApiError(400, 10005, "no suitable peers for placement, insufficient storage")


def cluster_unavailable() -> ApiError:
    """The reference's JSClusterNotAvailErr: a change may not have reached a quorum."""
    return ApiError(503, 10008, "JetStream system temporarily unavailable")


def peer_remap_failed() -> ApiError:
    return ApiError(503, 10075, "peer remap failed")


def server_not_member() -> ApiError:
    return ApiError(400, 10044, "server is not a member of the cluster")


def peer_not_member() -> ApiError:
    return ApiError(400, 10040, "peer not a member")


def replicas_negative() -> ApiError:
    return ApiError(400, 10133, "replicas count cannot be negative")


def msg_delete_failed(detail: str) -> ApiError:
    return ApiError(500, 10057, detail)


def purge_failed(detail: str) -> ApiError:
    return ApiError(500, 10110, detail)


def expected_stream_mismatch() -> ApiError:
    return ApiError(400, 10060, "expected stream does not match")


def wrong_last_sequence(seq: int) -> ApiError:
    return ApiError(400, 10071, f"wrong last sequence: {seq}")


def wrong_last_msg_id(msg_id: str) -> ApiError:
    return ApiError(400, 10070, f"wrong last msg ID: {msg_id}")


def expected_subject_seq_invalid() -> ApiError:
    return ApiError(400, 10193, "missing sequence for expected last sequence per subject")


def message_too_big() -> ApiError:
    return ApiError(400, 10054, "message size exceeds maximum allowed")


def header_too_big() -> ApiError:
    return ApiError(400, 10097, "header size exceeds maximum allowed of 64k")


def store_failed(detail: str) -> ApiError:
    """Discard-new refusals: the reference reports its store's error text here."""
    return ApiError(503, 10077, detail)


def subject_not_utf8() -> ApiError:
    """jetlake's own refusal: segments and the lake keep subjects as text (the reference
    stores any bytes)."""
    return ApiError(503, 10077, "subject is not valid UTF-8")


def sealed() -> ApiError:
    return ApiError(400, 10109, "invalid operation on sealed stream")


def rollup_failed(detail: str) -> ApiError:
    return ApiError(500, 10111, detail)


def ttl_invalid() -> ApiError:
    return ApiError(400, 10165, "invalid per-message TTL")


def ttl_disabled() -> ApiError:
    return ApiError(400, 10166, "per-message TTL is disabled")


def transform_invalid_source(detail: str) -> ApiError:
    return ApiError(400, 10155, f"stream transform source: {detail}")


def transform_invalid_destination(detail: str) -> ApiError:
    return ApiError(400, 10156, f"stream transform: {detail}")


def source_invalid_name() -> ApiError:
    return ApiError(400, 10141, "sourced stream name is invalid")


def wrong_last_sequence_constant() -> ApiError:
    return ApiError(400, 10164, "wrong last sequence")


def incr_disabled() -> ApiError:
    return ApiError(400, 10168, "message counters is disabled")


def incr_missing() -> ApiError:
    return ApiError(400, 10169, "message counter increment is missing")


def incr_payload() -> ApiError:
    return ApiError(400, 10170, "message counter has payload")


def incr_invalid() -> ApiError:
    return ApiError(400, 10171, "message counter increment is invalid")


def counter_broken() -> ApiError:
    return ApiError(400, 10172, "message counter is broken")


def atomic_disabled() -> ApiError:
    return ApiError(400, 10174, "atomic publish is disabled")


def atomic_missing_seq() -> ApiError:
    return ApiError(400, 10175, "atomic publish sequence is missing")


def atomic_incomplete() -> ApiError:
    return ApiError(400, 10176, "atomic publish batch is incomplete")


def atomic_unsupported_header(header: str) -> ApiError:
    return ApiError(400, 10177, f"atomic publish unsupported header used: {header}")


def atomic_invalid_id() -> ApiError:
    return ApiError(400, 10179, "atomic publish batch ID is invalid")


def atomic_too_large(limit: int) -> ApiError:
    return ApiError(400, 10199, f"atomic publish batch is too large: {limit}")


def atomic_invalid_commit() -> ApiError:
    return ApiError(400, 10200, "atomic publish batch commit is invalid")


def atomic_duplicate_msg_id() -> ApiError:
    return ApiError(400, 10201, "atomic publish batch contains duplicate message id")


def atomic_too_many_inflight() -> ApiError:
    return ApiError(429, 10210, "atomic publish too many inflight")


def schedules_source_with() -> ApiError:
    return ApiError(400, 10187, "stream source can not also schedule messages")


def schedules_disabled() -> ApiError:
    return ApiError(400, 10188, "message schedules is disabled")


def schedules_pattern_invalid() -> ApiError:
    return ApiError(400, 10189, "message schedules pattern is invalid")


def schedules_target_invalid() -> ApiError:
    return ApiError(400, 10190, "message schedules target is invalid")


def schedules_ttl_invalid() -> ApiError:
    return ApiError(400, 10191, "message schedules invalid per-message TTL")


def schedules_rollup_invalid() -> ApiError:
    return ApiError(400, 10192, "message schedules invalid rollup")


def schedules_source_invalid() -> ApiError:
    return ApiError(400, 10203, "message schedules source is invalid")


def schedules_scheduler_invalid() -> ApiError:
    return ApiError(400, 10212, "message schedules invalid scheduler")


def schedules_time_zone_invalid() -> ApiError:
    return ApiError(400, 10223, "message schedules time zone is invalid")


def mirror_with_counters() -> ApiError:
    return ApiError(400, 10173, "stream mirrors can not also calculate counters")


def mirror_with_schedules() -> ApiError:
    return ApiError(400, 10186, "stream mirrors can not also schedule messages")


def mirror_with_atomic() -> ApiError:
    return ApiError(400, 10198, "stream mirrors can not also use atomic publishing")


def mirror_with_batched() -> ApiError:
    return ApiError(400, 10209, "stream mirrors can not also use batch publishing")
