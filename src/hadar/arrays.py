"""Array types for annotations (``numpy.typing``), shared by every layer; imports nothing of hadar."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

#: Floats: rates (steps/s), times (s), shares, LP data.
FloatArray = npt.NDArray[np.float64]
#: Indices and counts.
IntArray = npt.NDArray[np.intp]
#: Masks.
BoolArray = npt.NDArray[np.bool_]
