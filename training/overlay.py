"""Config overlays: nested dicts (YAML files, flags) laid on configuration dataclasses, every key and type checked.

Every key must exist and every value must fit its field's annotated type; nothing unknown is silently ignored.
`ConfigError` and `check_choice` serve every floor's config.
"""

from __future__ import annotations

import dataclasses
import types
import typing
import warnings
from collections.abc import Mapping
from typing import Any, Literal


class ConfigError(ValueError):
    """A configuration value or key is invalid; the message names it and says what is allowed."""


def overlay(obj: Any, data: dict[str, Any], where: str, renamed: Mapping[str, str], section: str = "") -> Any:
    """A copy of dataclass `obj` with the values of nested dict `data`, each checked against its field's type.

    Args:
        where: What to name in errors (the file, the flag).
        renamed: Dotted keys of earlier versions → their names now (read with a FutureWarning).
        section: The dotted path of `obj` inside the whole config ('' at the top).

    Raises:
        ConfigError: an unknown key, a value of the wrong type, or a key set under both its names.
    """
    hints = typing.get_type_hints(type(obj))
    names = {f.name for f in dataclasses.fields(obj)}
    changes: dict[str, Any] = {}
    for old_key, value in data.items():
        key = renamed.get(section + old_key, section + old_key)[len(section):]
        if key != old_key:
            if key in data:
                raise ConfigError(f"{where}: both {old_key!r} and its new name {key!r} are set; keep only {key!r}.")
            warnings.warn(f"{where}: config key {old_key!r} is now {key!r}; the old name will stop working in a "
                          "later version.", FutureWarning, stacklevel=2)
        if key not in names:
            raise ConfigError(f"{where}: unknown config key {key!r} in {type(obj).__name__}; known: {sorted(names)}.")
        current = getattr(obj, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: section {key!r} must be a mapping, got {value!r}.")
            changes[key] = overlay(current, value, f"{where}:{key}", renamed, f"{section}{key}.")
        else:
            changes[key] = _coerce(value, hints[key], f"{where}:{key}")
    return dataclasses.replace(obj, **changes)


def _coerce(value: Any, hint: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: value {value!r} does not fit type {hint}.")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where}: value {value!r} is not one of {list(args)}.")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"{where}: expected a list of {len(args)} values, got {value!r}.")
        return tuple(_coerce(v, a, where) for v, a in zip(value, args, strict=True))
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}.")
        return [_coerce(v, args[0], where) for v in value]
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}.")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}.")
        return value
    if hint is float:
        if isinstance(value, str):  # YAML 1.1 reads '2e-4' (no '.') as a string
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{where}: expected a number, got {value!r}.") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}.")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}.")
        return value
    return value


def check_choice(name: str, value: Any, choices: Any) -> None:
    allowed = typing.get_args(choices)
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {list(allowed)}, got {value!r}.")
