"""The built-in tiny models' config.json contents, by preset name ("tiny-llama").

Each family file declares its own presets (a module-level TINY_PRESETS dict, from the
bases in mobius/tiny/bases.py); this table is their union over the registry's family
modules, so adding a family adds its presets here without an edit.
"""

from __future__ import annotations

from mobius.models.registry import FAMILY_MODULES

#: preset name -> the name of the mobius/models module that declares it
PRESET_MODULES: dict[str, str] = {}
TINY_PRESETS: dict[str, dict] = {}
for _module in FAMILY_MODULES:
    for _name, _config in getattr(_module, "TINY_PRESETS", {}).items():
        if _name in TINY_PRESETS:
            raise ValueError(f"tiny preset {_name} is declared twice "
                             f"({PRESET_MODULES[_name]}, {_module.__name__})")
        PRESET_MODULES[_name] = _module.__name__.rsplit(".", 1)[-1]
        TINY_PRESETS[_name] = _config
