"""The daemon's configuration and presets as one value that ``Reload`` replaces whole.

Every part that reads them holds the same ``Settings`` and reads it at the moment of use, so a
reload reaches each of them at once and an operation never mixes an old config with new presets.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from hostagent.config import Config
from hostagent.presets import Preset

log = logging.getLogger(__name__)


@dataclass
class Settings:
    config: Config
    presets: dict[str, Preset]

    def preset(self, name: str) -> Preset | None:
        return self.presets.get(name)

    def replace(self, config: Config, presets: dict[str, Preset]) -> None:
        self.config = config
        self.presets = presets
        log.info("Reloaded configuration from %s and %d presets", config.source, len(presets))
