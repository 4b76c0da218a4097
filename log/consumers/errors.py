"""Consumer API errors with the reference server's codes (`server/errors.json`).

Kept apart from the stream errors in `log.errors` (same `ApiError` type) so
the consumer rules and the API shell name one constructor per condition.
"""

from __future__ import annotations

from log.errors import ApiError


def create_failed(detail: str) -> ApiError:
    """The reference wraps any non-API error of a create or update in 10012."""
    return ApiError(500, 10012, detail)


def name_exists() -> ApiError:
    return ApiError(400, 10013, "consumer name already in use")


def already_exists() -> ApiError:
    return ApiError(400, 10148, "consumer already exists")


def does_not_exist() -> ApiError:
    return ApiError(400, 10149, "consumer does not exist")


def replicas_exceed_stream() -> ApiError:
    return ApiError(400, 10126, "consumer config replica count exceeds parent stream")


def max_deliver_backoff() -> ApiError:
    return ApiError(400, 10116, "max deliver is required to be > length of backoff values")


def invalid_policy(detail: str) -> ApiError:
    return ApiError(400, 10094, detail)


def max_consumers() -> ApiError:
    return ApiError(400, 10026, "maximum consumers limit reached")


def durable_not_in_subject() -> ApiError:
    return ApiError(
        400, 10016, "consumer expected to be durable but no durable name set in subject"
    )


def durable_not_set() -> ApiError:
    return ApiError(400, 10018, "consumer expected to be durable but a durable name was not set")


def durable_mismatch() -> ApiError:
    return ApiError(400, 10017, "consumer name in subject does not match durable name in request")


def ephemeral_with_durable() -> ApiError:
    return ApiError(
        400, 10020, "consumer expected to be ephemeral but a durable name was set in request"
    )


def multiple_filters_in_subject() -> ApiError:
    return ApiError(
        400, 10137, "consumer with multiple subject filters cannot use subject based API"
    )


def filter_mismatch() -> ApiError:
    return ApiError(
        400, 10131, "Consumer create request did not match filtered subject from create subject"
    )


def path_separators() -> ApiError:
    return ApiError(400, 10127, "Consumer name can not contain path separators")


def wq_requires_explicit_ack() -> ApiError:
    return ApiError(400, 10098, "workqueue stream requires explicit ack")


def wq_not_deliver_all() -> ApiError:
    return ApiError(400, 10101, "consumer must be deliver all on workqueue stream")


def wq_multiple_unfiltered() -> ApiError:
    return ApiError(400, 10099, "multiple non-filtered consumers not allowed on workqueue stream")


def wq_not_unique() -> ApiError:
    return ApiError(400, 10100, "filtered consumer not unique on workqueue stream")


def bad_durable_name() -> ApiError:
    return ApiError(400, 10103, "durable name can not contain '.', '*', '>'")


def invalid_reset(detail: str) -> ApiError:
    return ApiError(400, 10204, f"invalid reset: {detail}")
