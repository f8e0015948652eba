"""Checks of what callers hand to raylog's public entry points and to the controller.

Clients run them before any remote call, so a mistake is refused at once, and the controller
runs them again on what it receives (a client can be bypassed). Each raises a typed error
naming the argument and the bad value. Plain Python: no Ray.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import reprlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from raylog.errors import InvalidArgumentError, InvalidConfigError, RaylogError

INT32_MAX = 2**31 - 1    # Kafka's int settings (ms, bytes, counts)
INT64_MAX = 2**63 - 1    # offsets and timestamps (Kafka's long)
MAX_ID_LENGTH = 255      # group, client and member ids

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 60


def short_repr(value: object) -> str:
    """``repr`` cut to a readable length: messages quote what they refuse."""
    return _repr.repr(value)


# -- names ---------------------------------------------------------------------------------------

def unknown_name(kind: str, name: object, valid: Iterable[str]) -> str:
    """``unknown <kind> 'x' (did you mean 'y'?)``, or the valid names when none is close."""
    valid = sorted(valid)
    close = difflib.get_close_matches(name, valid, n=1) if isinstance(name, str) else []
    hint = f"did you mean {close[0]!r}?" if close else f"valid: {', '.join(valid)}"
    return f"unknown {kind} {short_repr(name)} ({hint})"


def check_options(owner: str, given: Iterable[Any], valid: Iterable[str]) -> None:
    """Refuse the first name in ``given`` that is not in ``valid``, naming the closest."""
    valid = list(valid)
    for name in given:
        if name not in valid:
            raise InvalidConfigError(unknown_name(f"{owner} option", name, valid))


Config = TypeVar("Config")


def refuses_unknown_options(config_class: type[Config]) -> type[Config]:
    """A settings dataclass whose constructor refuses an unknown name with
    InvalidConfigError naming the closest field (a dataclass raises a plain TypeError)."""
    init = config_class.__init__
    fields = [f.name for f in dataclasses.fields(config_class)]

    @functools.wraps(init)
    def checked_init(self: Any, *args: Any, **settings: Any) -> None:
        check_options(config_class.__name__, settings, fields)
        init(self, *args, **settings)

    config_class.__init__ = checked_init
    return config_class


def build_config(config_class: type[Config], owner: str, settings: Mapping[str, Any],
                 also_valid: Iterable[str] = ()) -> Config:
    """A settings dataclass from keyword settings; an unknown name is InvalidConfigError
    naming the closest valid one (``also_valid``: the owner's other keyword arguments)."""
    fields = [f.name for f in dataclasses.fields(config_class)]
    check_options(owner, settings, [*fields, *also_valid])
    return config_class(**settings)


# -- numbers -------------------------------------------------------------------------------------

def check_int(what: str, value: object, minimum: int = 0, maximum: int = INT64_MAX,
              error: type[RaylogError] = InvalidArgumentError) -> int:
    """``value`` if it is an int (not a bool) in [minimum, maximum]."""
    if type(value) is not int or value < minimum:
        raise error(f"{what} must be an integer >= {minimum}, got {short_repr(value)}")
    if value > maximum:
        raise error(f"{what} must be an integer <= {maximum}, got {value}")
    return value


def check_int_fields(config: Any, *, skip: Iterable[str] = (), zero_ok: Iterable[str] = (),
                     optional: Iterable[str] = (), maximums: Mapping[str, int] | None = None,
                     ) -> None:
    """Check every field of a settings dataclass not in ``skip`` as an integer >= 1 (>= 0
    for ``zero_ok``; None allowed for ``optional``) and <= INT32_MAX (or its ``maximums``
    entry), raising InvalidConfigError naming the field and the value."""
    skip, zero_ok, optional = set(skip), set(zero_ok), set(optional)
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if field.name in skip or (value is None and field.name in optional):
            continue
        check_int(field.name, value, 0 if field.name in zero_ok else 1,
                  (maximums or {}).get(field.name, INT32_MAX), InvalidConfigError)


def check_timeout(what: str, seconds: object) -> float | None:
    """A wait in seconds: None (no limit) or a finite number >= 0."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or \
            not 0 <= seconds < math.inf:
        raise InvalidArgumentError(f"{what} must be None or a number of seconds >= 0, "
                                   f"got {short_repr(seconds)}")
    return seconds


def check_bool(what: str, value: object) -> bool:
    if type(value) is not bool:
        raise InvalidArgumentError(f"{what} must be True or False, got {short_repr(value)}")
    return value


def check_functions(shape: str, **functions: object) -> None:
    """Each of ``functions`` (an optional setting) is None or a callable ``shape`` (say
    "(bytes) -> object"); InvalidConfigError naming the first that is not."""
    for name, function in functions.items():
        if function is not None and not callable(function):
            raise InvalidConfigError(f"{name} must be a callable {shape}, got "
                                     f"{short_repr(function)}")


# -- ids ------------------------------------------------------------------------------------

def check_id(what: str, value: object, error: type[RaylogError] = InvalidConfigError) -> str:
    """A group, client or member id: a non-empty string of at most MAX_ID_LENGTH
    characters that UTF-8 can encode (it becomes a record key)."""
    if not isinstance(value, str) or not value:
        raise error(f"{what} must be a non-empty string, got {short_repr(value)}")
    if len(value) > MAX_ID_LENGTH:
        raise error(f"{what} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise error(f"{what} {short_repr(value)} is not valid Unicode") from None
    return value


def settings_from_environ(environ: Mapping[str, str],
                          variables: Mapping[str, tuple[str, Callable[[str], Any], str]]
                          ) -> dict[str, Any]:
    """The settings whose environment variable is set (and not blank), each parsed:
    ``variables`` maps a field to (its variable, the parser, what the variable must be). A
    value the parser refuses raises InvalidConfigError naming the variable, e.g.
    ``RAYLOG_X must be an integer, got 'many'``; range checks are the settings' own."""
    values = {}
    for field, (variable, parse, must_be) in variables.items():
        text = environ.get(variable, "").strip()
        if text:
            try:
                values[field] = parse(text)
            except ValueError:
                raise InvalidConfigError(f"{variable} must be {must_be}, got "
                                         f"{text!r}") from None
    return values
