"""The models the backend profiles and replays: GPT/BERT chains, Hugging Face decoders, a user's
own model (loaded, checked, cut into a layer chain, rebuilt on a rank), the parameters its
layers share, and the one interface every replay asks
(:class:`~backends.torch.models.replay_model.ReplayModel`).

Importing this package imports nothing (no torch): import its modules.
"""
