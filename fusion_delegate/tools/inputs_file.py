"""The .npz files of model inputs `check` saves and `check --inputs` and `diff --inputs` read."""
from __future__ import annotations

import numpy as np

from ..comparison import NotCheckable


def load_inputs(path: str, interpreter) -> list[list[np.ndarray]]:
    """Input lists from an .npz: arrays keyed by input name (or arr_0, ...) of the input's
    dtype and shape, or of [N, *shape] for N examples; NotCheckable if they do not fit."""
    try:
        with np.load(path, allow_pickle=False) as saved:
            arrays = {key: saved[key] for key in saved.files}
    except (OSError, ValueError) as error:
        raise NotCheckable(f"{path}: not a readable .npz file ({error})") from error
    details = interpreter.get_input_details()
    columns = []
    for i, detail in enumerate(details):
        name = detail["name"]
        array = arrays.get(name, arrays.get(f"arr_{i}"))
        if array is None:
            raise NotCheckable(f"{path}: no array for input '{name}' (keys: "
                               f"{', '.join(arrays) or 'none'})")
        shape, dtype = tuple(int(d) for d in detail["shape"]), np.dtype(detail["dtype"])
        if array.dtype != dtype:
            raise NotCheckable(f"{path}: input '{name}' must be {dtype.name}, the file has "
                               f"{array.dtype.name}")
        if array.shape == shape:
            array = array[None]
        elif array.shape[1:] != shape:
            raise NotCheckable(f"{path}: input '{name}' must have shape {list(shape)} (or "
                               f"[N, {', '.join(map(str, shape))}]), the file has "
                               f"{list(array.shape)}")
        columns.append(array)
    counts = {len(c) for c in columns}
    if len(counts) > 1:
        raise NotCheckable(f"{path}: the inputs hold different numbers of examples "
                           f"{sorted(counts)}")
    return [[c[k] for c in columns] for k in range(counts.pop() if counts else 0)]


def save_inputs(path: str, interpreter, inputs: list[np.ndarray]) -> None:
    """Arrays keyed by input name: what `load_inputs` (and `diff --inputs`) read back."""
    names = [d["name"] for d in interpreter.get_input_details()]
    np.savez(path, **dict(zip(names, inputs)))
