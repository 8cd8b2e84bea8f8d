"""A plugin that is broken on purpose: importing it fails."""

import this_module_does_not_exist_anywhere  # noqa: F401
