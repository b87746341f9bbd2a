"""One registry for everything the pipeline looks up by name: init methods, downstream tasks, training objectives
and stages (vocabtransfer.plan.methods, vocabtransfer.evaluate.tasks, vocabtransfer.plan.objectives,
vocabtransfer.plan.stages).

A `Registry` maps names to objects of one kind. An entry is either

* a lazy reference, `"package.module:attribute"`, declared where the registry is made: the module is imported
  the first time the name is looked up (or every name is listed), so naming the entries costs no import; or
* an object registered with `registry.register(name)(obj)`, or `@registry.register(name)` on its definition
  (a plugin, a test's throwaway method). When a lazy reference's module registers the very object the
  reference names as it is imported, that fulfils the reference.

The built-in entries may also be `declared` in one place elsewhere: a reference to a sequence of specs (each with
its `name`, e.g. the init methods' `MethodInfo`s in vocabtransfer.plan.method_catalog), read the first time the
registry is used at all (so that the module declaring them may import the registry's own), each spec's entry
being `entry(spec)` (the spec itself, or a lazy reference it carries: `MethodInfo.run`). Two registries can thus
be derived from one list of specs.

A name registered twice is one error naming both places; an object that fails the registry's `check` (its
declared interface: a callable, a subclass, an instance of a dataclass) is one error naming it. Item
assignment (`registry[name] = obj`) and `del` replace and remove on purpose, for tests that patch an entry.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Generic, TypeVar

from vocabtransfer.errors import VocabTransferError

T = TypeVar("T")
Check = Callable[[Any], "str | None"]  # an object -> why it does not fit the registry's interface (None: it does)


def _where(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', type(obj).__name__)}"


def reference_parts(reference: str) -> tuple[str, str]:
    """(module, attribute) of a `"package.module:attribute"` reference (an empty string for a missing part)."""
    module, _, attribute = reference.partition(":")
    return module, attribute


def resolve(reference: str) -> Any:
    """The object a `"package.module:attribute"` reference names (its module imported)."""
    module, attribute = reference_parts(reference)
    if not module or not attribute:
        raise VocabTransferError(f"{reference!r}: a reference is 'package.module:attribute'")
    return getattr(importlib.import_module(module), attribute)


class Registry(MutableMapping[str, T], Generic[T]):
    """Named objects of one kind (`kind`, for messages), lazy references resolved on first use, duplicates
    refused, each object checked against the interface `check` returns a reason for."""

    def __init__(
        self,
        kind: str,
        lazy: dict[str, str] | None = None,
        check: Check | None = None,
        declared: str | None = None,
        entry: Callable[[Any], Any] = lambda spec: spec,
    ) -> None:
        self.kind = kind
        self._check = check
        self._entries: dict[str, Any] = {}  # name -> the object, or its reference (a str) until resolved
        self._lazy: set[str] = set()
        self._declared, self._entry = declared, entry  # the specs, read on first use (`_table`)
        for name, reference in (lazy or {}).items():
            self._entries[name] = reference
            self._lazy.add(name)

    def _table(self) -> dict[str, Any]:
        """The entries, the `declared` specs' first (read once, on first use): a name declared twice is one error."""
        if self._declared is not None:
            declared, self._declared = self._declared, None  # before resolving: its module may use the registry
            try:
                specs = resolve(declared)
            except BaseException:
                self._declared = declared  # read again on the next use, failing as loudly
                raise
            for spec in specs:
                name, obj = spec.name, self._entry(spec)
                if name in self._entries:
                    raise VocabTransferError(
                        f"{self.kind} {name!r} is declared twice in {declared}; rename one of them"
                    )
                if isinstance(obj, str):
                    if not all(reference_parts(obj)):
                        raise VocabTransferError(
                            f"{self.kind} {name!r} ({declared}): {obj!r} is no 'package.module:attribute' reference"
                        )
                    self._lazy.add(name)
                else:
                    self._verify(name, obj, declared)
                self._entries[name] = obj
        return self._entries

    # -- registering
    def register(self, name: str) -> Callable[[T], T]:
        """`@registry.register("name")`: add the object under `name`; a name already taken is an error,
        except by the object its lazy reference names."""

        def add(obj: T) -> T:
            entries = self._table()
            if name in entries:
                taken = entries[name]
                fulfils = name in self._lazy and isinstance(taken, str) and taken == _where(obj)
                if not fulfils:
                    first = taken if isinstance(taken, str) else _where(taken)
                    raise VocabTransferError(
                        f"{self.kind} {name!r} is registered twice: by {first} and by {_where(obj)}; rename one of them"
                    )
            self._verify(name, obj)
            entries[name] = obj
            self._lazy.discard(name)
            return obj

        return add

    def _verify(self, name: str, obj: Any, where: str | None = None) -> None:
        why = self._check(obj) if self._check else None
        if why:
            raise VocabTransferError(f"{self.kind} {name!r} ({where or _where(obj)}): {why}")

    # -- looking up
    def _resolved(self, name: str) -> T:
        entry = self._table()[name]
        if isinstance(entry, str) and name in self._lazy:
            obj = resolve(entry)  # its module may register it (fulfilling the reference) as it is imported
            if self._table()[name] is not obj:
                self._verify(name, obj, entry)
                self._table()[name] = obj
            self._lazy.discard(name)
            return obj
        return entry

    def __getitem__(self, name: str) -> T:
        if name not in self._table():
            raise KeyError(name)
        return self._resolved(name)

    def get_or_raise(self, name: str, key: str = "") -> T:
        """The object, or one error naming the unknown name (and the params `key` it came from) and the known."""
        if name not in self._table():
            where = f" ({key})" if key else ""
            raise VocabTransferError(
                f"unknown {self.kind} {name!r}{where}; available: {', '.join(sorted(self._table()))}"
            )
        return self._resolved(name)

    def module_of(self, name: str) -> str:
        """The module that holds `name`'s object, read from its lazy reference while unresolved (nothing imported)."""
        entry = self._table()[name]
        if isinstance(entry, str) and name in self._lazy:
            return entry.partition(":")[0]
        return getattr(entry, "__module__", "")

    def load(self) -> None:
        """Resolve every lazy reference (what listing every entry's object needs)."""
        for name in [n for n in self._table() if n in self._lazy]:  # in the order they were declared
            self._resolved(name)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._table()))

    def __len__(self) -> int:
        return len(self._table())

    def __contains__(self, name: object) -> bool:
        return name in self._table()

    # -- replacing on purpose (tests)
    def __setitem__(self, name: str, obj: T) -> None:
        self._table()[name] = obj
        self._lazy.discard(name)

    def __delitem__(self, name: str) -> None:
        del self._table()[name]
        self._lazy.discard(name)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._table())})"
