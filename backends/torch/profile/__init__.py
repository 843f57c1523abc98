"""Measuring a model layer by layer into a trace: times, saved-for-backward bytes, FLOPs and
host ops per layer, a user's model, a GPU you do not have (fake tensors and a roofline),
profiling under the replay's process layout, and the host's cost per op and per Python call.

Importing this package imports nothing (no torch): import its modules.
"""
