"""Models and the engines that run them: loading a spec (packaged models, int8 copies, trimmed
output heads, prepacked weights, GGUF files), devices and dtypes, and the engine seam
(:mod:`.engine`) with its two engines, torch (:mod:`.torch_engine`) and llama.cpp
(:mod:`.llamacpp`). Nothing here drafts or verifies.
"""
