"""The configuration: its sections (``sections``), presets (``presets/``), reading files and
``--set`` (``read``), the curriculum's stages (``curriculum``), the choices a setting takes
(``choices``), resolving the layers into one frozen config (``resolve``) and the config as a
file (``file``). Torch-free: a command is checked before torch loads."""
