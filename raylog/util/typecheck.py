"""Refusing calls whose arguments do not match the function's annotations.

The controller's methods are called by clients that can be bypassed: ``@checked`` makes each
one refuse arguments of the wrong type with InvalidArgumentError before its body runs, instead
of failing somewhere inside with a TypeError or AttributeError. The annotations are the
contract, so they must say what callers really send. Understood: ``Any``, None, classes,
unions, ``list[X]``, ``tuple[X, Y]`` and ``tuple[X, ...]`` (a list is accepted for a tuple:
both travel alike), ``dict[K, V]`` / ``Mapping[K, V]``, and the abstract collections. Anything
else is accepted unchecked rather than refused by mistake. An ``int`` is never a bool.
"""

from __future__ import annotations

import collections.abc
import functools
import inspect
import logging
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, Union

from raylog.errors import InvalidArgumentError
from raylog.util.arguments import short_repr

logger = logging.getLogger(__name__)

_MAPPINGS = (dict, collections.abc.Mapping)
_SEQUENCES = (list, tuple)


def matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` fits the type ``hint`` (True for hints this module does not know)."""
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is Union or origin is types.UnionType:
        return any(matches(value, arg) for arg in args)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if origin is list:
        return isinstance(value, list) and all(matches(v, args[0]) for v in value) \
            if args else isinstance(value, list)
    if origin is tuple:
        if not isinstance(value, _SEQUENCES):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(matches(v, args[0]) for v in value)
        return not args or (len(value) == len(args) and
                            all(matches(v, a) for v, a in zip(value, args, strict=True)))
    if origin in _MAPPINGS:
        if not isinstance(value, collections.abc.Mapping):
            return False
        return not args or all(matches(k, args[0]) and matches(v, args[1])
                               for k, v in value.items())
    if isinstance(origin, type):  # Iterable[X], Sequence[X], ...: the container only
        return isinstance(value, origin)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


F = TypeVar("F", bound=Callable[..., Any])


def _parameter_hints(function: Callable[..., Any]) -> dict[str, Any]:
    """The evaluated annotations of ``function``'s parameters, now, in its module: Ray ships
    an actor's methods to its workers without the module globals that only annotations use."""
    hints = {}
    for name, annotation in function.__annotations__.items():
        if name == "return":
            continue
        try:
            hints[name] = eval(annotation, function.__globals__) \
                if isinstance(annotation, str) else annotation
        except (NameError, AttributeError, SyntaxError, TypeError) as e:
            logger.warning("argument %s of %s goes unchecked: %r", name,
                           function.__qualname__, e)
    return hints


def checked(function: F) -> F:
    """Make ``function`` (sync or async) check its arguments against its annotations."""
    signature = inspect.signature(function)
    hints = _parameter_hints(function)

    def check(args: tuple, kwargs: dict) -> None:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise InvalidArgumentError(f"{function.__name__}: {e}") from None
        for name, value in bound.arguments.items():
            kind = signature.parameters[name].kind
            if kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                continue
            if name in hints and not matches(value, hints[name]):
                wanted = function.__annotations__[name]
                raise InvalidArgumentError(f"{function.__name__}: {name} must be {wanted}, "
                                           f"got {short_repr(value)}")

    if inspect.iscoroutinefunction(function):
        @functools.wraps(function)
        async def checked_async(*args: Any, **kwargs: Any) -> Any:
            check(args, kwargs)
            return await function(*args, **kwargs)

        return typing.cast(F, checked_async)

    @functools.wraps(function)
    def checked_sync(*args: Any, **kwargs: Any) -> Any:
        check(args, kwargs)
        return function(*args, **kwargs)

    return typing.cast(F, checked_sync)


def served_by(part: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """An async method of a class whose attribute ``part`` holds the object that serves it:
    ``method`` (a coroutine function of that object's class) called with the same arguments,
    checked against its annotations first. The class's API is then a list of what each part
    serves, each signature and docstring said once, in the part::

        class Controller:
            create_topic = served_by("topics", TopicManager.create_topic)
    """
    check_then_call = checked(method)

    @functools.wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await check_then_call(getattr(self, part), *args, **kwargs)

    return call
