"""The examples in the docstrings of the matrix, signing and statistics modules run."""

from __future__ import annotations

import doctest

import pytest

from oracle.base import signing
from oracle.matrix import run as matrix_run
from oracle.matrix import spec as matrix
from oracle.reports import stats


@pytest.mark.parametrize("module", [matrix, matrix_run, signing, stats])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
