"""A floor given as a dict, shown as it is enforced: a read-only copy.

A retriever takes its floor once, when it is built; the dict it shows as `retriever.filter` is that floor's own copy,
frozen (nested dicts and lists too), so an in-place edit of it cannot make the retriever show a floor other than
the one every search applies and every save writes. An edit raises, naming what to do instead.
"""

from __future__ import annotations

import copy
from typing import Any, NoReturn

EDIT_REFUSED = ("a retriever's filter is its floor (a tenant's access), fixed when the retriever was built; this "
                "is a read-only copy of it. Make another retriever with retriever.with_floor(new_filter), or narrow "
                "one call with invoke(query, filter=...).")


def _refuse(*_: Any, **__: Any) -> NoReturn:
    raise TypeError(EDIT_REFUSED)


class FrozenDict(dict[str, Any]):
    """A dict that refuses every edit (`EDIT_REFUSED`); copies of it are plain dicts."""

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {k: copy.deepcopy(v, memo) for k, v in self.items()}

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


class FrozenList(list[Any]):
    """A list that refuses every edit (`EDIT_REFUSED`); copies of it are plain lists."""

    __setitem__ = __delitem__ = append = extend = insert = pop = remove = clear = sort = reverse = _refuse  # type: ignore[assignment]
    __iadd__ = __imul__ = _refuse  # type: ignore[assignment]

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(v, memo) for v in self]

    def __copy__(self) -> list[Any]:
        return list(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


def frozen(value: Any) -> Any:
    """A read-only deep copy of a floor's dict (dicts and lists frozen all the way down; other values as they are)."""
    if isinstance(value, dict):
        return FrozenDict({k: frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return FrozenList(frozen(v) for v in value)
    return value


__all__ = ["EDIT_REFUSED", "FrozenDict", "FrozenList", "frozen"]
