"""Stage: time. Interleaved reference/candidate trials with an L2 flush and a GPU spin that hides
host time, the torch.compile baseline cache, and the physical floor.
"""
