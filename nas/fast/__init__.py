"""Fast paths of the cell: each implements the equations of `nas.cells.cell` (and of the search cell's mixed
node, `nas.cells.search_cell`), and is checked against them and the slow reference by tests/test_fused_cell.py
and tests/test_fused_search_cell.py. A reader of the definition need not open these.

- `frozen_loop`: the frozen cell's time loop as one autograd Function with a hand-written backward, its steps
  in C++ (`nas/fast/csrc/`) or Triton (`triton_loop`).
- `search_loop`: the same for the search cell, for any mixing rule, over the op set it declares (its steps in C++).
- `kernels`: finds, compiles and loads the C++ kernels.

Each loop says what it supports (`supports`); a cell it does not support, or any cell where the C++ kernels
are not built, runs the readable path (its definition, through autograd). A run reaches all of this as one
object, its backend (`backends`), which `nas.speed`, the one module outside this package that imports it,
chooses from the run's settings and attaches to its models.
"""
