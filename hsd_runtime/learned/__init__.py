"""Drafters with trained weights: block-draft heads on the level above (heads, BPD and its lattice),
steering a drafter with the hidden states of the level above, and the card every trained file
carries.
"""
