"""A pytest plugin, registered by this package's ``pytest11`` entry point: the markers the test kit uses.

The conformance suite marks its tests ``e2e`` (they start real vLLM engines); registering the marker
here means a plugin author's suite gets no "Unknown pytest.mark.e2e" warning, whatever folder pytest
runs from and whatever the author's own pytest configuration says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: starts real vLLM engines (slow)")
