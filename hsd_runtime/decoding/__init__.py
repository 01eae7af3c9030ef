"""The decoding core, the same for every engine: the cached model, sampling, the verification rules
(chains and RRS trees), the drafters (model levels and the n-gram lookup), the hierarchy's loop and
its results.
"""
