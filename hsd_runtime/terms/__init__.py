"""The runtime's torch-free vocabulary: model specs and the kinds of drafter they name, tree shapes
and drafted trees, the closed sets of values, the bounds of numbers and the errors. The planner reads these without torch installed.
"""
