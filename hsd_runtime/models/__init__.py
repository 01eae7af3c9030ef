"""Models and the engines that run them: loading a spec (:mod:`.loading`; where its weights come
from, :mod:`.sources`; views that share them, :mod:`.views`), int8 copies, trimmed output heads,
prepacked weights, devices and dtypes, and the engine seam (:mod:`.engine`) with its three engines,
torch (:mod:`.torch_engine`), static (:mod:`.static_engine`) and llama.cpp (:mod:`.llamacpp`).
Nothing here drafts or verifies.
"""
