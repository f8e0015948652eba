"""The schema registry's typed errors, each with the error code and HTTP status Confluent's
Schema Registry answers with, so the REST layer maps an error to its answer in one place
and Confluent's clients recognise it."""

from __future__ import annotations

from raylog.errors import RaylogError


class SchemaRegistryError(RaylogError):
    """Base class of the registry's errors: ``error_code`` and ``http_status`` as Confluent's
    Schema Registry gives them."""

    error_code = 50001
    http_status = 500


class SubjectNotFoundError(SchemaRegistryError):
    error_code, http_status = 40401, 404


class VersionNotFoundError(SchemaRegistryError):
    error_code, http_status = 40402, 404


class SchemaNotFoundError(SchemaRegistryError):
    error_code, http_status = 40403, 404


class SubjectSoftDeletedError(SchemaRegistryError):
    """The subject's versions are all soft-deleted (a second soft delete, for one)."""

    error_code, http_status = 40404, 404


class SubjectNotSoftDeletedError(SchemaRegistryError):
    """A permanent delete of a subject that was not soft-deleted first."""

    error_code, http_status = 40405, 404


class VersionSoftDeletedError(SchemaRegistryError):
    error_code, http_status = 40406, 404


class VersionNotSoftDeletedError(SchemaRegistryError):
    """A permanent delete of a version that was not soft-deleted first."""

    error_code, http_status = 40407, 404


class SubjectConfigNotFoundError(SchemaRegistryError):
    """The subject has no compatibility level of its own (it uses the global one)."""

    error_code, http_status = 40408, 404


class IncompatibleSchemaError(SchemaRegistryError):
    """The schema breaks the subject's compatibility rules; ``messages`` says what breaks
    and where, one line per problem."""

    error_code, http_status = 409, 409

    def __init__(self, message: str, messages: list[str] | None = None) -> None:
        super().__init__(message)
        self.messages = list(messages or [])


class InvalidSchemaError(SchemaRegistryError, ValueError):
    """Not a valid Avro schema (or a schema type or feature the registry does not take)."""

    error_code, http_status = 42201, 422


class InvalidVersionError(SchemaRegistryError, ValueError):
    error_code, http_status = 42202, 422


class InvalidCompatibilityLevelError(SchemaRegistryError, ValueError):
    error_code, http_status = 42203, 422


class InvalidSubjectError(SchemaRegistryError, ValueError):
    """A subject name that is empty, too long or holds control characters."""

    error_code, http_status = 42208, 422


class RegistryStoreError(SchemaRegistryError):
    """Writing to or reading from ``_schemas`` failed; nothing was registered."""

    error_code, http_status = 50001, 500

    retriable = True


class SerializationError(SchemaRegistryError, ValueError):
    """Bytes that are not in Confluent's wire format, or a value its schema refuses."""
