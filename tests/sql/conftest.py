"""The walls' server and SQL service, one for the package's modules (`tests.sql.walls`)."""

from tests.sql.walls import walled  # noqa: F401
