"""Many trials as a matrix of cells: the matrix file, running it, cell archives and their
intake, run ids, the signed controls record, the reducer's verification and re-scoring
(DESIGN §10).

The names of the former module ``oracle.matrix`` are still found here, with a deprecation
warning, for one release: import them from ``oracle.matrix.spec`` (or from ``oracle``).
"""

from oracle.base.moved import forward_names

__getattr__ = forward_names("oracle.matrix", "oracle.matrix.spec")
