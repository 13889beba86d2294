"""A compiled kernel's machine code, kept beside it and linked again without numba's loader.

numba's cache loads a kernel through its dispatcher: a module import, the signature typed, the
cache index read, its library unserialized and linked: 14 ms a kernel of two functions, most
of a warm start (MobileNetV3-Small int8: 11 kernels, 157 of 300 ms). What a delegate kernel
needs is two addresses. So when a kernel compiles, the object code numba made for each C entry
point (`<name>_invoke`, `<name>_part`) is kept with the symbols it resolves from outside
(numba's C helpers, the Python C API); a later process adds the objects to numba's own JIT
engine, as numba does with its cached objects, and asks for the addresses: about 0.3 ms each.

The objects are numba's own, for the target in the kernel's cache key, so they run what numba
would have loaded. Linking an object whose symbols do not resolve ends the process (LLVM's
fatal error): every symbol is checked first, after numba has registered its helpers, and an
entry that does not check out is not linked (the caller loads the kernel through numba).
"""
from __future__ import annotations

import functools
import pickle
import sys
from types import ModuleType

from llvmlite import binding
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import cpu_target

#: The kernel module's C entry points kept, by the role they play (suffixes of the kernel name).
ROLES = ("invoke", "part")


def machine_code(module: ModuleType, name: str) -> bytes | None:
    """The kept form of kernel `name`'s entry points in `module`, just compiled; None where
    numba loaded them from its cache (it keeps no object code then) or another numba lacks
    what is read here."""
    functions = {}
    for role in ROLES:
        entry = getattr(module, f"{name}_{role}", None)
        if entry is None:
            continue
        try:
            library = entry._library
            code = library._get_compiled_object()
            llvm_module = library._final_module
            symbol = entry.native_name
        except (AttributeError, RuntimeError, ValueError):
            return None
        outside = sorted({value.name for values in (llvm_module.functions,
                                                    llvm_module.global_variables)
                          for value in values
                          if value.is_declaration and not value.name.startswith("llvm.")})
        functions[role] = (symbol, bytes(code), outside)
    if "invoke" not in functions:
        return None
    return pickle.dumps({"python": sys.implementation.cache_tag, "functions": functions})


@functools.cache
def _engine():
    """numba's JIT engine, once numba has registered its C helpers and runtime with LLVM (as
    before it loads anything from its cache)."""
    context = cpu_target.target_context
    context.refresh()
    return context.codegen()._engine


def link(content: bytes) -> dict[str, int] | None:
    """The addresses of kept entry points (by role), their objects added to numba's JIT
    engine; None if `content` is not such a record for this Python or a symbol it needs is
    not there. `content` is trusted: read only from a directory the kernel cache trusts (the
    rest of the cache key, numba's target and versions, is in the file's name)."""
    try:
        record = pickle.loads(content)
        entries = [(role, str(symbol), bytes(code), [str(s) for s in outside])
                   for role, (symbol, code, outside) in record["functions"].items()
                   if role in ROLES]
        python = record["python"]
    except Exception:  # noqa: BLE001 - a damaged record is a miss
        return None
    if python != sys.implementation.cache_tag or not any(e[0] == "invoke" for e in entries):
        return None
    with global_compiler_lock:
        try:
            engine = _engine()
            execution_engine = engine._ee
        except AttributeError:
            return None
        known = (lambda symbol: binding.address_of_symbol(symbol)
                 or engine.is_symbol_defined(symbol))
        if not all(known(symbol) for *_, outside in entries for symbol in outside):
            return None
        addresses = {}
        for role, symbol, code, _ in entries:
            execution_engine.add_object_file(binding.ObjectFileRef.from_data(code))
            addresses[role] = execution_engine.get_function_address(symbol)
    return addresses if all(addresses.values()) else None
